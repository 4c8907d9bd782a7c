// "Did you mean" suggestions and shell completions, both read from the CLI11 definition.
#include "help.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <numeric>

#include "output.hpp"

namespace rpcroute::cli {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment over three rows; the words are option and command names.
  std::vector<std::size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  std::iota(prev.begin(), prev.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2 = prev;
    prev = cur;
  }
  return prev[b.size()];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  const auto bare = [](std::string_view s) { return s.substr(s.find_first_not_of('-')); };
  const std::size_t limit = std::clamp<std::size_t>(bare(word).size() / 3, 1, 3);
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    // A prefix ("--ch" for "--chain") is as good as one edit.
    const auto d = c.starts_with(word) && word.size() >= 3 ? 1 : edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

namespace {

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* a = &app; a != nullptr; a = a->get_parent()) {
    for (const auto* opt : a->get_options()) {
      for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
    }
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const auto* s : app.get_subcommands({})) names.push_back(s->get_name());
  return names;
}

const CLI::Option* find_option(const CLI::App& app, const std::string& name) {
  for (const CLI::App* a = &app; a != nullptr; a = a->get_parent()) {
    if (const auto* opt = a->get_option_no_throw(name)) return opt;
  }
  return nullptr;
}

}  // namespace

std::string suggestion(CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* cur = &app;
  bool value_next = false;  // the previous word was an option that takes a value
  for (const auto& arg : args) {
    if (arg == "--") break;
    if (value_next) {
      value_next = false;
      continue;
    }
    if (arg.size() > 2 && arg.starts_with("--")) {
      const auto name = arg.substr(0, arg.find('='));
      if (const auto* opt = find_option(*cur, name)) {
        value_next = opt->get_type_size_min() > 0 && name.size() == arg.size();
        continue;
      }
      if (auto n = nearest(name, option_names(*cur)); !n.empty())
        return fmt::format(" (did you mean '{}'?)", n);
      continue;
    }
    if (arg.starts_with("-")) {
      // A short option, perhaps with its value attached ("-pfile"): skip its value when apart.
      const auto* opt = find_option(*cur, arg.substr(0, 2));
      value_next = opt != nullptr && opt->get_type_size_min() > 0 && arg.size() == 2;
      continue;
    }
    const auto subs = subcommand_names(*cur);
    if (subs.empty()) continue;  // a positional argument
    if (std::find(subs.begin(), subs.end(), arg) != subs.end()) {
      cur = cur->get_subcommand(arg);
      continue;
    }
    if (auto n = nearest(arg, subs); !n.empty()) return fmt::format(" (did you mean '{}'?)", n);
    return fmt::format(" (commands: {})", fmt::join(subs, ", "));
  }
  return {};
}

namespace {

/// Each command path ("", "call", "state show") with its subcommands and its options.
struct CommandNode {
  std::string path;
  const CLI::App* app = nullptr;
};

void collect(const CLI::App& app, const std::string& path, std::vector<CommandNode>& out) {
  out.push_back({path, &app});
  for (const auto* s : app.get_subcommands({}))
    collect(*s, path.empty() ? s->get_name() : path + " " + s->get_name(), out);
}

std::vector<std::string> flags_of(const CLI::App& app) {
  std::vector<std::string> words;
  for (const auto* opt : app.get_options()) {
    if (opt->get_positional()) continue;
    for (const auto& l : opt->get_lnames()) words.push_back("--" + l);
    for (const auto& s : opt->get_snames()) words.push_back("-" + s);
  }
  return words;
}

/// The first line of a description, for inside fish's single quotes (which take \\ and \').
std::string fish_quoted(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, text.find('\n'))) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string bash_script(const CLI::App& app) {
  std::vector<CommandNode> nodes;
  collect(app, "", nodes);
  std::string s =
      "# bash completion for rpcroute (generated by `rpcroute completion bash`)\n"
      "_rpcroute() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} path=\"\" i w words\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    w=${COMP_WORDS[i]}\n"
      "    case \"$path:$w\" in\n";
  for (const auto& n : nodes) {
    for (const auto* sub : n.app->get_subcommands({})) {
      s += fmt::format("      '{}:{}') path=\"${{path:+$path }}{}\" ;;\n", n.path, sub->get_name(),
                       sub->get_name());
    }
  }
  s += "    esac\n  done\n  case $path in\n";
  for (const auto& n : nodes) {
    auto words = subcommand_names(*n.app);
    const auto flags = flags_of(*n.app);
    words.insert(words.end(), flags.begin(), flags.end());
    s += fmt::format("    '{}') words='{}' ;;\n", n.path, fmt::join(words, " "));
  }
  s += "  esac\n"
       "  mapfile -t COMPREPLY < <(compgen -W \"$words\" -- \"$cur\")\n"
       "}\n"
       "complete -o default -F _rpcroute rpcroute\n";
  return s;
}

std::string zsh_script(const CLI::App& app) {
  // zsh runs the bash function through bashcompinit: one definition, the same words.
  return "#compdef rpcroute\n"
         "# zsh completion for rpcroute (generated by `rpcroute completion zsh`)\n"
         "autoload -U +X bashcompinit && bashcompinit\n" +
         bash_script(app);
}

std::string fish_script(const CLI::App& app) {
  std::vector<CommandNode> nodes;
  collect(app, "", nodes);
  std::string s = "# fish completion for rpcroute (generated by `rpcroute completion fish`)\n";
  s += "complete -c rpcroute -f\n";
  for (const auto& n : nodes) {
    // The condition: the words of this path seen, and (at the top) no subcommand yet.
    std::string cond;
    if (n.path.empty()) {
      cond = "__fish_use_subcommand";
    } else {
      std::string seen;
      for (auto word : CLI::detail::split(n.path, ' '))
        seen += fmt::format("{}__fish_seen_subcommand_from {}", seen.empty() ? "" : "; and ", word);
      cond = seen;
    }
    for (const auto* sub : n.app->get_subcommands({})) {
      s += fmt::format("complete -c rpcroute -n '{}' -a {} -d '{}'\n", cond, sub->get_name(),
                       fish_quoted(sub->get_description()));
    }
    for (const auto* opt : n.app->get_options()) {
      if (opt->get_positional()) continue;
      std::string line = fmt::format("complete -c rpcroute -n '{}'", cond);
      for (const auto& l : opt->get_lnames()) line += " -l " + l;
      for (const auto& sn : opt->get_snames()) line += " -s " + sn;
      if (opt->get_type_size_min() > 0) line += " -r";
      line += fmt::format(" -d '{}'\n", fish_quoted(opt->get_description()));
      s += line;
    }
  }
  return s;
}

}  // namespace

void setup_completion(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand(
      "completion", "Print a shell completion script: bash, zsh or fish (see rpcroute(1))");
  auto shell = std::make_shared<std::string>();
  sub->add_option("shell", *shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  sub->callback([&app, &exit_code, shell] {
    std::string script;
    if (*shell == "bash") {
      script = bash_script(app);
    } else if (*shell == "zsh") {
      script = zsh_script(app);
    } else {
      script = fish_script(app);
    }
    fmt::print("{}", script);
    exit_code = 0;
  });
}

}  // namespace rpcroute::cli
