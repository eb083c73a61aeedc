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

// For `plimsoll frobnicate` (or `plimsoll estimate frob`): CLI11 says only "A subcommand is required", not which
// word it could not take as one.
std::string unknown_command_message(const CLI::App& app) {
  const CLI::App* deepest = &app;
  std::string command = "plimsoll";
  for (bool deeper = true; deeper;) {
    const auto parsed = deepest->get_subcommands([](const CLI::App* candidate) { return candidate->parsed() > 0; });
    deeper = !parsed.empty();
    if (deeper) {
      deepest = parsed.front();
      command += " " + deepest->get_name();
    }
  }
  const auto subcommands = deepest->get_subcommands([](const CLI::App*) { return true; });
  const std::vector<std::string> left = deepest->remaining();
  if (subcommands.empty() || left.empty() || left.front().starts_with("-")) return "";
  std::string names;
  for (const CLI::App* sub : subcommands) names += (names.empty() ? "" : ", ") + sub->get_name();
  return fmt::format("plimsoll: error: \"{}\" is not a {} command; give one of {} (see {} --help)\n", left.front(),
                     command, names, command);
}

}  // namespace

std::string usage_failure_message(const CLI::App* app, const CLI::Error& error) {
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) {
    if (std::string unknown = unknown_command_message(*app); !unknown.empty()) return unknown;
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
