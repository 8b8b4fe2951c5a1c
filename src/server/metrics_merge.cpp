#include "server/metrics_merge.h"

#include <map>
#include <string_view>

namespace deepinfer::server {
namespace {

struct Family {
  std::string help, type;  // the first "# HELP" and "# TYPE" lines any rank gave it
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
  const auto family = [&](std::string_view name) -> Family& {
    auto [found, added] = families.try_emplace(std::string(name));
    if (added) order.push_back(found->first);
    return found->second;
  };
  for (const RankMetrics& rank : ranks) {
    std::string_view text = rank.text;
    std::string current;  // the family the rank's last comment named: its samples follow
    while (!text.empty()) {
      const std::size_t end = text.find('\n');
      const std::string_view line = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
      if (line.empty()) continue;
      if (line.front() == '#') {
        const std::string_view name = comment_family(line);
        if (name.empty()) continue;
        current = std::string(name);
        std::string& kept = line[2] == 'H' ? family(name).help : family(name).type;
        if (kept.empty()) kept = std::string(line) + "\n";
        continue;
      }
      const std::string sample = labelled(line, rank.rank);
      if (sample.empty()) continue;
      // A sample before any comment is a family of its own, by its name.
      family(current.empty() ? line.substr(0, line.find_first_of("{ ")) : std::string_view(current)).samples +=
          sample + "\n";
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& f = families.at(name);
    out += f.help;
    out += f.type;
    out += f.samples;
  }
  return out;
}

}  // namespace deepinfer::server
