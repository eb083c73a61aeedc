#include "cli/usage_errors.hpp"

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace plimsoll::cli {
namespace {

// The option `name` of the command line that was parsed: the parsed subcommand's, else the app's own.
const CLI::Option* parsed_option(const CLI::App& app, const std::string& name, std::string& command) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* candidate) { return candidate->parsed() > 0; })) {
    if (const CLI::Option* found = parsed_option(*sub, name, command)) {
      command = command.empty() ? sub->get_name() : sub->get_name() + " " + command;
      return found;
    }
  }
  return app.get_option_no_throw(name);
}

// What a value of CLI11's type name `type` is, in words.
std::string kind_of(const std::string& type) {
  if (type == "FLOAT") return "a number";
  if (type == "UINT") return "a whole number of at least 0";
  if (type == "INT") return "a whole number";
  return fmt::format("a value of the form {}", type);
}

// The innermost subcommand the command line named (the app itself if none), and its words ("plimsoll run").
const CLI::App* deepest_parsed(const CLI::App& app, std::string& command) {
  const CLI::App* deepest = &app;
  command = "plimsoll";
  for (bool deeper = true; deeper;) {
    const auto parsed = deepest->get_subcommands([](const CLI::App* candidate) { return candidate->parsed() > 0; });
    deeper = !parsed.empty();
    if (deeper) {
      deepest = parsed.front();
      command += " " + deepest->get_name();
    }
  }
  return deepest;
}

// For `plimsoll frobnicate` (or `plimsoll estimate frob`): CLI11 says only "A subcommand is required", not which
// word it could not take as one.
std::string unknown_command_message(const CLI::App& app) {
  std::string command;
  const CLI::App* deepest = deepest_parsed(app, command);
  const auto subcommands = deepest->get_subcommands([](const CLI::App*) { return true; });
  std::vector<std::string> left = deepest->remaining();
  std::erase(left, std::string("--"));  // CLI11 keeps a top-level `--` among the words it could not place
  if (subcommands.empty() || left.empty()) return "";
  std::string names;
  for (const CLI::App* sub : subcommands) names += (names.empty() ? "" : ", ") + sub->get_name();
  if (left.front().starts_with("-"))
    return fmt::format("plimsoll: error: {} has no option {}; give one of its commands, {} (see {} --help)\n",
                       command, left.front(), names, command);
  return fmt::format("plimsoll: error: \"{}\" is not a {} command; give one of {} (see {} --help)\n", left.front(),
                     command, names, command);
}

// For `plimsoll run --bogus -- true`: CLI11 lists the words it could not place, with the `--` that ended the
// options among them and in reverse order ("-- --bogus"). Name the first unknown option and its command instead.
std::string unexpected_words_message(const CLI::App& app) {
  std::string command;
  const CLI::App* deepest = deepest_parsed(app, command);
  for (const std::string& word : deepest->remaining()) {
    if (word == "--") continue;
    if (word.starts_with("-")) {
      // `plimsoll run python3 --version`: the program's own option, given before the `--` that ends run's.
      const bool program_option = deepest->get_name() == "run";
      return fmt::format("plimsoll: error: {} has no option {}; see {} --help for the options it takes{}\n", command,
                         word, command, program_option ? " (put the program and its arguments after --)" : "");
    }
    return fmt::format("plimsoll: error: {} takes no argument \"{}\"; see {} --help\n", command, word, command);
  }
  return "";
}

}  // namespace

std::string usage_failure_message(const CLI::App* app, const CLI::Error& error) {
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) {
    if (std::string unknown = unknown_command_message(*app); !unknown.empty()) return unknown;
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    if (std::string unexpected = unexpected_words_message(*app); !unexpected.empty()) return unexpected;
  }
  constexpr std::string_view prefix = "Could not convert: ";
  const std::string text = error.what();
  const std::size_t equals = text.find(" = ");
  if (dynamic_cast<const CLI::ConversionError*>(&error) == nullptr || text.rfind(prefix, 0) != 0 ||
      equals == std::string::npos)
    return CLI::FailureMessage::simple(app, error);
  const std::string name = text.substr(prefix.size(), equals - prefix.size());
  const std::string value = text.substr(equals + 3);
  std::string command;
  const CLI::Option* option = parsed_option(*app, name, command);
  if (option == nullptr) return CLI::FailureMessage::simple(app, error);
  const std::string kind = kind_of(option->get_type_name());
  return fmt::format("plimsoll: error: {} \"{}\" is not {}; give {} {} (see plimsoll {}{}--help)\n", name, value,
                     kind, name, kind, command, command.empty() ? "" : " ");
}

}  // namespace plimsoll::cli
