// Reads a Hugging Face tokenizer.json into the pieces of Tokenizer::Impl, refusing (with the file
// and field named) anything whose behaviour we do not reproduce exactly.
#include <atomic>

#include "core/error.h"
#include "io/json_file.h"
#include "io/tokenizer/byte_level.h"
#include "io/tokenizer/tokenizer_impl.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using tokenizer::PreTokenizerStep;
using tokenizer::SplitBehavior;

// Field access with errors that name the file and the field's path.
class Reader {
 public:
  explicit Reader(std::string_view origin) : origin_(origin) {}

  [[noreturn]] void error(const std::string& where, const std::string& message) const {
    fail(origin_, ": ", where, ": ", message);
  }
  const json& object(const json& parent, const std::string& where) const {
    if (!parent.is_object()) error(where, "expected an object");
    return parent;
  }
  // nullptr when the key is absent.
  const json* find(const json& object, const char* key) const {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  bool boolean(const json& object, const char* key, bool fallback, const std::string& where) const {
    const json* value = find(object, key);
    if (!value || value->is_null()) return fallback;
    if (!value->is_boolean()) error(where + "." + key, "expected true or false");
    return value->get<bool>();
  }
  std::string string(const json& value, const std::string& where) const {
    if (!value.is_string()) error(where, "expected a string");
    return value.get<std::string>();
  }
  std::optional<std::string> optional_string(const json& object, const char* key, const std::string& where) const {
    const json* value = find(object, key);
    if (!value || value->is_null()) return std::nullopt;
    return string(*value, where + "." + key);
  }
  std::string type(const json& object, const std::string& where) const {
    const json* value = find(object, "type");
    if (!value) error(where, "missing \"type\"");
    return string(*value, where + ".type");
  }
  int32_t id(const json& value, const std::string& where) const {
    if (!value.is_number_integer()) error(where, "expected an integer id");
    const auto id = value.get<int64_t>();
    if (id < 0 || id > INT32_MAX) error(where, "id " + std::to_string(id) + " is out of range");
    return static_cast<int32_t>(id);
  }
  std::string_view origin() const { return origin_; }

 private:
  std::string_view origin_;
};

// model.vocab entries and model.merges strings are taken out of the document while it is parsed:
// 128K-entry objects in nlohmann's std::map DOM cost more than everything else in loading.
struct LargeModelFields {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::string> merges;
};

json parse_tokenizer_json(std::string_view text, std::string_view origin, LargeModelFields& large) {
  std::string path[4];  // the key at depths 1..3
  std::string vocab_key;
  const auto in_model = [&](int depth, const char* field) {
    return depth == 3 && path[1] == "model" && path[2] == field;
  };
  const json::parser_callback_t capture = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth <= 3) {
      if (in_model(depth, "vocab")) {
        vocab_key = parsed.get<std::string>();
        return false;  // neither key nor value enters the document
      }
      path[depth] = parsed.get<std::string>();
      for (int deeper = depth + 1; deeper < 4; ++deeper) path[deeper].clear();
      return true;
    }
    if (event != json::parse_event_t::value) return true;
    if (in_model(depth, "vocab")) {
      if (!parsed.is_number_integer() || parsed.get<int64_t>() < 0 || parsed.get<int64_t>() > INT32_MAX) {
        fail(origin, ": model.vocab[\"", vocab_key, "\"]: expected an integer id");
      }
      large.vocab.emplace_back(std::move(vocab_key), static_cast<int32_t>(parsed.get<int64_t>()));
      return false;
    }
    if (in_model(depth, "merges") && parsed.is_string()) {
      large.merges.push_back(std::move(parsed.get_ref<std::string&>()));
      return false;
    }
    return true;
  };
  try {
    return json::parse(text, capture);
  } catch (const json::parse_error& e) {
    fail(origin, ": invalid JSON at byte ", e.byte, ": ", e.what());
  } catch (const json::exception& e) {  // out_of_range for numbers beyond double, e.g. 1e400
    fail(origin, ": invalid JSON: ", e.what());
  }
}

void check_normalizer(const Reader& reader, const json& normalizer, const std::string& where) {
  if (normalizer.is_null()) return;
  reader.object(normalizer, where);
  const std::string type = reader.type(normalizer, where);
  if (type == "Sequence") {
    const json* list = reader.find(normalizer, "normalizers");
    if (!list || !list->is_array()) reader.error(where + ".normalizers", "expected an array");
    for (std::size_t i = 0; i < list->size(); ++i) {
      check_normalizer(reader, (*list)[i], where + ".normalizers[" + std::to_string(i) + "]");
    }
    return;
  }
  fail("unsupported normalizer ", type, " in ", reader.origin(),
       " (only no normalizer or an empty Sequence is supported)");
}

SplitBehavior split_behavior(const Reader& reader, const json& step, const std::string& where) {
  const json* value = reader.find(step, "behavior");
  if (!value) reader.error(where, "missing \"behavior\"");
  const std::string name = reader.string(*value, where + ".behavior");
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  reader.error(where + ".behavior", "unknown split behavior " + name);
}

void add_pre_tokenizer(const Reader& reader, const json& step, const std::string& where,
                       std::vector<PreTokenizerStep>& steps) {
  reader.object(step, where);
  const std::string type = reader.type(step, where);
  const std::string origin = std::string(reader.origin()) + ": " + where;
  if (type == "Sequence") {
    const json* list = reader.find(step, "pretokenizers");
    if (!list || !list->is_array()) reader.error(where + ".pretokenizers", "expected an array");
    for (std::size_t i = 0; i < list->size(); ++i) {
      add_pre_tokenizer(reader, (*list)[i], where + ".pretokenizers[" + std::to_string(i) + "]", steps);
    }
    return;
  }
  PreTokenizerStep result{};
  if (type == "Split") {
    result.kind = PreTokenizerStep::Kind::Split;
    const json* pattern = reader.find(step, "pattern");
    if (!pattern || !pattern->is_object()) reader.error(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    if (const json* regex = reader.find(*pattern, "Regex")) {
      result.regex = std::make_unique<tokenizer::Regex>(reader.string(*regex, where + ".pattern.Regex"), origin);
    } else if (const json* literal = reader.find(*pattern, "String")) {
      result.regex = std::make_unique<tokenizer::Regex>(
          tokenizer::Regex::literal(reader.string(*literal, where + ".pattern.String"), origin));
    } else {
      reader.error(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    result.behavior = split_behavior(reader, step, where);
    result.invert = reader.boolean(step, "invert", false, where);
  } else if (type == "ByteLevel") {
    for (const PreTokenizerStep& earlier : steps) {
      if (earlier.kind == PreTokenizerStep::Kind::ByteLevel) {
        reader.error(where, "more than one ByteLevel pre-tokenizer is not supported");
      }
    }
    result.kind = PreTokenizerStep::Kind::ByteLevel;
    result.add_prefix_space = reader.boolean(step, "add_prefix_space", true, where);
    if (reader.boolean(step, "use_regex", true, where)) {
      result.regex = std::make_unique<tokenizer::Regex>(tokenizer::kGpt2Pattern, origin);
    }
  } else if (type == "Digits") {
    // The library splits on char::is_numeric (general category N), one character per match.
    result.kind = PreTokenizerStep::Kind::Split;
    result.regex = std::make_unique<tokenizer::Regex>("\\p{N}", origin);
    result.behavior = reader.boolean(step, "individual_digits", false, where) ? SplitBehavior::Isolated
                                                                               : SplitBehavior::Contiguous;
  } else {
    fail("unsupported pre_tokenizer ", type, " in ", reader.origin(), " (", where, ")");
  }
  steps.push_back(std::move(result));
}

tokenizer::BpeConfig read_bpe(const Reader& reader, const json& model, LargeModelFields& large) {
  const std::string where = "model";
  reader.object(model, where);
  if (const json* type = reader.find(model, "type")) {
    const std::string name = reader.string(*type, "model.type");
    if (name != "BPE") fail("unsupported model ", name, " in ", reader.origin(), " (only BPE is supported)");
  }
  if (const json* dropout = reader.find(model, "dropout"); dropout && !dropout->is_null()) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      reader.error("model.dropout", "BPE dropout is not supported (encoding would be random)");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto value = reader.optional_string(model, key, where);
    if (value && !value->empty()) reader.error(std::string("model.") + key, "is not supported");
  }
  if (reader.boolean(model, "byte_fallback", false, where)) {
    reader.error("model.byte_fallback", "byte_fallback is not supported");
  }

  tokenizer::BpeConfig config;
  config.unk_token = reader.optional_string(model, "unk_token", where);
  config.fuse_unk = reader.boolean(model, "fuse_unk", false, where);
  config.ignore_merges = reader.boolean(model, "ignore_merges", false, where);

  const json* vocab = reader.find(model, "vocab");
  if (!vocab || !vocab->is_object()) reader.error("model.vocab", "expected an object of token: id");
  config.vocab = std::move(large.vocab);

  const json* merges = reader.find(model, "merges");
  if (!merges || !merges->is_array()) reader.error("model.merges", "expected an array");
  // Like the library, all merges are "left right" strings or all are [left, right] pairs.
  if (!large.merges.empty() && !merges->empty()) reader.error("model.merges", "mixes merge strings and pairs");
  config.merges.reserve(large.merges.size() + merges->size());
  std::size_t index = 0;
  for (const std::string& line : large.merges) {
    const std::string merge_where = "model.merges[" + std::to_string(index++) + "]";
    if (line.starts_with("#version")) continue;  // header line of merges.txt files
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      reader.error(merge_where, "expected \"left right\" with exactly one space");
    }
    config.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  for (const json& merge : *merges) {
    const std::string merge_where = "model.merges[" + std::to_string(index++) + "]";
    if (merge.is_array() && merge.size() == 2) {
      config.merges.emplace_back(reader.string(merge[0], merge_where + "[0]"),
                                 reader.string(merge[1], merge_where + "[1]"));
    } else {
      reader.error(merge_where, "expected \"left right\" or [left, right]");
    }
  }
  return config;
}

std::vector<tokenizer::AddedToken> read_added_tokens(const Reader& reader, const json& root) {
  std::vector<tokenizer::AddedToken> tokens;
  const json* list = reader.find(root, "added_tokens");
  if (!list || list->is_null()) return tokens;
  if (!list->is_array()) reader.error("added_tokens", "expected an array");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& entry = reader.object((*list)[i], where);
    tokenizer::AddedToken token;
    const json* content = reader.find(entry, "content");
    const json* id = reader.find(entry, "id");
    if (!content || !id) reader.error(where, "needs \"id\" and \"content\"");
    token.content = reader.string(*content, where + ".content");
    token.id = reader.id(*id, where + ".id");
    token.special = reader.boolean(entry, "special", false, where);
    token.lstrip = reader.boolean(entry, "lstrip", false, where);
    token.rstrip = reader.boolean(entry, "rstrip", false, where);
    token.single_word = reader.boolean(entry, "single_word", false, where);
    token.normalized = reader.boolean(entry, "normalized", true, where);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

DecoderKind read_decoder(const Reader& reader, const json& root) {
  const json* decoder = reader.find(root, "decoder");
  if (!decoder || decoder->is_null()) return DecoderKind::Join;
  reader.object(*decoder, "decoder");
  const std::string type = reader.type(*decoder, "decoder");
  if (type == "ByteLevel") return DecoderKind::ByteLevel;
  fail("unsupported decoder ", type, " in ", reader.origin(), " (only ByteLevel or none is supported)");
}

// Special tokens named in tokenizer_config.json: "bos_token": "<s>" or {"content": "<s>", ...}.
std::optional<std::string> config_token(const json& config, const char* key, const std::string& origin) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  fail(origin, ": ", key, ": expected a string or {\"content\": ...}");
}

std::optional<TokenId> lookup(const Tokenizer::Impl& impl, const std::string& content) {
  if (const auto it = impl.added_ids.find(content); it != impl.added_ids.end()) return it->second;
  return impl.model.token_to_id(content);
}

}  // namespace

std::shared_ptr<Tokenizer::Impl> load_tokenizer(std::string_view json_text, std::string_view origin,
                                                const std::string* config_json,
                                                const std::string& config_origin) {
  LargeModelFields large;
  const json root = parse_tokenizer_json(json_text, origin, large);
  const Reader reader(origin);
  reader.object(root, "top level");
  for (const char* key : {"truncation", "padding"}) {
    if (const json* value = reader.find(root, key); value && !value->is_null()) {
      reader.error(key, "is not supported (encode returns every token, unpadded)");
    }
  }
  if (const json* normalizer = reader.find(root, "normalizer")) check_normalizer(reader, *normalizer, "normalizer");

  std::vector<PreTokenizerStep> steps;
  if (const json* pre_tokenizer = reader.find(root, "pre_tokenizer"); pre_tokenizer && !pre_tokenizer->is_null()) {
    add_pre_tokenizer(reader, *pre_tokenizer, "pre_tokenizer", steps);
  }
  const json* model = reader.find(root, "model");
  if (!model) reader.error("top level", "missing \"model\"");

  auto impl = std::make_shared<Tokenizer::Impl>(std::string(origin), tokenizer::BpeModel(read_bpe(reader, *model, large), origin));
  impl->pre_tokenizer = tokenizer::PreTokenizer(std::move(steps));
  impl->decoder = read_decoder(reader, root);

  // Added tokens keep the ids the file declares. (The library re-numbers added tokens that are
  // not in the vocabulary consecutively from the vocabulary size, warning when that disagrees
  // with the file; the declared ids are the ones the model was trained with.)
  std::vector<tokenizer::AddedToken> added = read_added_tokens(reader, root);
  std::size_t limit = impl->model.id_limit();
  for (const tokenizer::AddedToken& token : added) {
    if (token.content.empty()) continue;
    const std::string where = "added token \"" + token.content + "\"";
    if (static_cast<std::size_t>(token.id) > impl->model.id_limit() + added.size() + (1u << 20)) {
      reader.error(where, "id " + std::to_string(token.id) + " is far beyond the vocabulary");
    }
    if (const auto in_vocab = impl->model.token_to_id(token.content); in_vocab && *in_vocab != token.id) {
      reader.error(where, "declares id " + std::to_string(token.id) + " but the vocabulary has it as " +
                              std::to_string(*in_vocab));
    }
    const auto [it, inserted] = impl->added_ids.emplace(token.content, token.id);
    if (!inserted && it->second != token.id) reader.error(where, "appears twice with different ids");
    limit = std::max(limit, static_cast<std::size_t>(token.id) + 1);
  }

  impl->decoded.resize(limit);
  impl->flags.assign(limit, 0);
  const tokenizer::ByteLevelAlphabet& alphabet = tokenizer::ByteLevelAlphabet::instance();
  const auto set_token = [&](TokenId id, const std::string& token) {
    std::string& bytes = impl->decoded[id];
    bytes.clear();
    // A token with a character outside the byte alphabet decodes to its own UTF-8 (as in the library).
    if (impl->decoder != DecoderKind::ByteLevel || !alphabet.decode(token, bytes)) bytes = token;
    impl->flags[id] |= Tokenizer::Impl::kKnown;
  };
  for (std::size_t id = 0; id < impl->model.id_limit(); ++id) {
    if (const std::string* token = impl->model.id_to_token(static_cast<TokenId>(id))) set_token(static_cast<TokenId>(id), *token);
  }
  for (const tokenizer::AddedToken& token : added) {
    if (token.content.empty()) continue;
    set_token(token.id, token.content);
    impl->flags[token.id] |= Tokenizer::Impl::kAdded;
  }
  // Decoding skips by content: an id is special when any special added token has its content.
  for (const tokenizer::AddedToken& token : added) {
    if (token.special && !token.content.empty()) impl->flags[impl->added_ids.at(token.content)] |= Tokenizer::Impl::kSpecial;
  }
  impl->added = tokenizer::AddedVocabulary(std::move(added));

  if (config_json) {
    const json config = parse_json(*config_json, config_origin);
    if (!config.is_object()) fail(config_origin, ": expected a JSON object");
    if (const auto bos = config_token(config, "bos_token", config_origin)) impl->bos = lookup(*impl, *bos);
    if (const auto eos = config_token(config, "eos_token", config_origin)) impl->eos = lookup(*impl, *eos);
  }
  for (const char* name : {"<｜begin▁of▁sentence｜>", "<|endoftext|>"}) {
    if (!impl->bos) impl->bos = lookup(*impl, name);
  }
  for (const char* name : {"<｜end▁of▁sentence｜>", "<|endoftext|>"}) {
    if (!impl->eos) impl->eos = lookup(*impl, name);
  }

  static std::atomic<uint64_t> next_cache_owner{1};
  impl->cache_owner = next_cache_owner.fetch_add(1);
  return impl;
}

}  // namespace deepinfer
