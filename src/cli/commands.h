// The tessera command's subcommands. Each Add*Command registers one subcommand on the app.
// A subcommand reports bad input by throwing CommandError from its callback; main prints the
// message to stderr and exits 2 without writing anything to stdout.
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>

namespace tessera::cli {

struct CommandError : std::runtime_error {
  explicit CommandError(const std::string& message, int exit_code = 2)
      : std::runtime_error(message), code(exit_code) {}
  int code;
};

void AddTopologyCommand(CLI::App& app);
void AddPlanCommand(CLI::App& app);
void AddAgentCommand(CLI::App& app);
void AddSimCommand(CLI::App& app);
void AddSimServeCommand(CLI::App& app);
void AddSimRecoveryCommand(CLI::App& app);  // sim_recovery_command.cc
void AddHeadCommand(CLI::App& app);
void AddClusterCommands(CLI::App& app);
void AddResourceCommands(CLI::App& app);
void AddApplyWaitCommands(CLI::App& app);  // apply, wait, completion
void AddRouterCommand(CLI::App& app);
void AddUserCommands(CLI::App& app);  // user create|list|delete, audit (user_commands.cc)

}  // namespace tessera::cli
