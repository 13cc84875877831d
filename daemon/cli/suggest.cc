#include "cli/suggest.h"

#include "common/nearest.h"

namespace partrain::cli {
namespace {

// The option of `app` that `word` ("--steps", "--steps=3", "-o") names, or nullptr.
const CLI::Option* option_named(const CLI::App& app, const std::string& word) {
  const std::string name = word.substr(0, word.find('='));
  for (const CLI::Option* o : app.get_options()) {
    if (!o->get_positional() && o->check_name(name)) return o;
  }
  return nullptr;
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
  }
  return names;
}

}  // namespace

std::string suggest_for(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& w = args[i];
    if (w == "--") break;
    if (w.size() > 1 && w[0] == '-') {
      const CLI::Option* o = option_named(*at, w);
      if (o == nullptr) {
        if (w.rfind("--", 0) != 0) continue;  // short options are too short to guess
        const std::string best = nearest(w.substr(0, w.find('=')), option_names(*at));
        return best.empty() ? "" : " (did you mean '" + best + "'?)";
      }
      if (w.find('=') == std::string::npos && o->get_items_expected_min() > 0) ++i;  // its value
      continue;
    }
    // A command of this level, or a positional argument.
    std::vector<std::string> commands;
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : at->get_subcommands({})) {
      commands.push_back(sub->get_name());
      if (sub->get_name() == w) next = sub;
    }
    if (next != nullptr) {
      at = next;
      continue;
    }
    if (commands.empty()) continue;  // a positional argument of a leaf command
    const std::string best = nearest(w, commands);
    return best.empty() ? "" : " (did you mean '" + best + "'?)";
  }
  return "";
}

}  // namespace partrain::cli
