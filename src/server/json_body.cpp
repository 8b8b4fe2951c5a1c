#include "server/json_body.h"

#include <memory>
#include <unordered_set>
#include <vector>

namespace deepinfer::server {
namespace {

using Json = nlohmann::ordered_json;
using Object = Json::object_t;  // nlohmann::ordered_map: a vector of (key, value) pairs
using Array = Json::array_t;

// Objects up to this many keys find duplicates by a linear scan; larger ones through a hash
// index of positions (keys are hashed where they lie, never copied).
constexpr std::size_t kLinearKeys = 16;

// The object's i-th (key, value) pair (ordered_map's own operator[] takes a key).
const Object::value_type& entry(const Object& object, std::size_t i) {
  return static_cast<const Object::Container&>(object)[i];
}
Object::value_type& entry(Object& object, std::size_t i) { return static_cast<Object::Container&>(object)[i]; }

struct KeyHash {
  const Object* object;
  std::size_t operator()(std::size_t at) const { return std::hash<std::string>{}(entry(*object, at).first); }
};
struct KeyEqual {
  const Object* object;
  bool operator()(std::size_t a, std::size_t b) const { return entry(*object, a).first == entry(*object, b).first; }
};
using KeyIndex = std::unordered_set<std::size_t, KeyHash, KeyEqual>;

class BudgetedBuilder {
 public:
  explicit BudgetedBuilder(const JsonBudget& budget) : budget_(budget) {}

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(Json::number_integer_t v) { return value(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return value(v); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return value(v); }
  bool string(Json::string_t& v) { return value(std::move(v)); }
  bool binary(Json::binary_t& v) { return value(Json::binary(std::move(v))); }

  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& name) {
    if (++keys_ > budget_.max_keys)
      return over("The request body's JSON has more than " + std::to_string(budget_.max_keys) + " object keys");
    Frame& frame = stack_.back();
    Object& object = frame.node->get_ref<Object&>();
    if (object.size() < kLinearKeys) {
      for (auto& entry : object)
        if (entry.first == name) {
          element_ = &entry.second;  // a duplicate: first place, last value (as nlohmann's parser)
          return true;
        }
      object.Object::Container::emplace_back(std::move(name), nullptr);
      element_ = &object.back().second;
      return true;
    }
    if (!frame.index) {
      frame.index = std::make_unique<KeyIndex>(object.size() * 2, KeyHash{&object}, KeyEqual{&object});
      for (std::size_t i = 0; i < object.size(); ++i) frame.index->insert(i);
    }
    object.Object::Container::emplace_back(std::move(name), nullptr);
    const auto [at, inserted] = frame.index->insert(object.size() - 1);
    if (!inserted) object.Object::Container::pop_back();
    element_ = &entry(object, *at).second;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    if (status_ == JsonBodyResult::Status::Ok) {
      status_ = JsonBodyResult::Status::Malformed;
      message_ = error.what();
    }
    return false;
  }

  JsonBodyResult result() && {
    JsonBodyResult out;
    out.status = status_;
    out.message = std::move(message_);
    if (status_ == JsonBodyResult::Status::Ok) out.value = std::move(root_);
    return out;
  }

 private:
  struct Frame {
    Json* node;
    std::unique_ptr<KeyIndex> index;  // objects past kLinearKeys
  };

  bool over(std::string message) {
    status_ = JsonBodyResult::Status::OverBudget;
    message_ = std::move(message);
    return false;
  }

  // Where the next value goes: the root, the array's end, or the element the last key made.
  Json* place() {
    if (stack_.empty()) return &root_;
    Json& node = *stack_.back().node;
    if (node.is_array()) {
      Array& array = node.get_ref<Array&>();
      array.emplace_back();
      return &array.back();
    }
    return element_;
  }

  template <class V>
  bool value(V&& v) {
    if (++values_ > budget_.max_values)
      return over("The request body's JSON has more than " + std::to_string(budget_.max_values) + " values");
    *place() = Json(std::forward<V>(v));
    return true;
  }

  bool open(Json container) {
    if (++values_ > budget_.max_values)
      return over("The request body's JSON has more than " + std::to_string(budget_.max_values) + " values");
    if (stack_.size() >= budget_.max_depth)
      return over("The request body's JSON nests deeper than " + std::to_string(budget_.max_depth) + " levels");
    Json* slot = place();
    *slot = std::move(container);
    stack_.push_back(Frame{slot, nullptr});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  const JsonBudget& budget_;
  Json root_;
  std::vector<Frame> stack_;
  Json* element_ = nullptr;
  std::size_t keys_ = 0;
  std::size_t values_ = 0;
  JsonBodyResult::Status status_ = JsonBodyResult::Status::Ok;
  std::string message_;
};

}  // namespace

JsonBodyResult parse_json_with_budget(std::string_view text, const JsonBudget& budget) {
  BudgetedBuilder builder(budget);
  const bool ok = Json::sax_parse(text, &builder, nlohmann::detail::input_format_t::json, /*strict=*/true);
  JsonBodyResult result = std::move(builder).result();
  if (!ok && result.status == JsonBodyResult::Status::Ok) {
    result.status = JsonBodyResult::Status::Malformed;
    result.message = "malformed JSON";
  }
  return result;
}

}  // namespace deepinfer::server
