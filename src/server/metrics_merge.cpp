#include "server/metrics_merge.h"

#include <map>
#include <string_view>

namespace deepinfer::server {
namespace {

struct Family {
  std::string help;  // the "# HELP" and "# TYPE" lines, from the first rank that had them
  std::string samples;
};

// "# HELP name ..." / "# TYPE name ...": the family's name, else "".
std::string_view comment_family(std::string_view line) {
  for (std::string_view prefix : {"# HELP ", "# TYPE "})
    if (line.substr(0, prefix.size()) == prefix) {
      std::string_view rest = line.substr(prefix.size());
      return rest.substr(0, rest.find(' '));
    }
  return {};
}

std::string labelled(std::string_view sample, int rank) {
  const std::string label = "engine=\"" + std::to_string(rank) + "\"";
  const std::size_t name_end = sample.find_first_of("{ ");
  if (name_end == std::string_view::npos) return {};
  if (sample[name_end] == ' ')
    return std::string(sample.substr(0, name_end)) + "{" + label + "}" + std::string(sample.substr(name_end));
  // Label values are quoted and may hold "}" or escaped quotes: the set ends at the first "}"
  // outside quotes.
  bool quoted = false;
  for (std::size_t i = name_end + 1; i < sample.size(); ++i) {
    const char c = sample[i];
    if (quoted && c == '\\') {
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == '}' && !quoted) {
      const bool empty = i == name_end + 1;
      return std::string(sample.substr(0, i)) + (empty ? "" : ",") + label + std::string(sample.substr(i));
    }
  }
  return {};
}

}  // namespace

std::string merge_rank_metrics(const std::vector<RankMetrics>& ranks) {
  std::vector<std::string> order;
  std::map<std::string, Family, std::less<>> families;
  for (const RankMetrics& rank : ranks) {
    std::string_view text = rank.text;
    std::string current;
    bool writing_help = false;
    while (!text.empty()) {
      const std::size_t end = text.find('\n');
      const std::string_view line = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
      if (line.empty()) continue;
      if (line.front() == '#') {
        const std::string_view name = comment_family(line);
        if (name.empty()) continue;
        if (name != current) {
          current = std::string(name);
          auto [found, added] = families.try_emplace(current);
          if (added) order.push_back(current);
          writing_help = found->second.help.empty();
        }
        if (writing_help) families[current].help.append(line).push_back('\n');
        continue;
      }
      if (current.empty()) {  // a sample before any comment: its own family, by its name
        current = std::string(line.substr(0, line.find_first_of("{ ")));
        if (families.try_emplace(current).second) order.push_back(current);
        writing_help = false;
      }
      std::string sample = labelled(line, rank.rank);
      if (!sample.empty()) families[current].samples.append(sample).push_back('\n');
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& family = families[name];
    out += family.help;
    out += family.samples;
  }
  return out;
}

}  // namespace deepinfer::server
