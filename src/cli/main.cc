// tessera: the command-line entry point. Subcommands live in *_command.cc.
#include <iostream>

#include "cli/commands.h"
#include "cli/service_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: a control plane for accelerator slices"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  tessera::cli::AddTopologyCommand(app);
  tessera::cli::AddPlanCommand(app);
  tessera::cli::AddAgentCommand(app);
  tessera::cli::AddSimCommand(app);
  tessera::cli::AddSimServeCommand(app);
  tessera::cli::AddSimRecoveryCommand(app);
  tessera::cli::AddHeadCommand(app);
  tessera::cli::AddClusterCommands(app);
  tessera::cli::AddResourceCommands(app);
  tessera::cli::AddApplyWaitCommands(app);
  tessera::cli::AddServiceCommands(app);
  tessera::cli::AddRouterCommand(app);
  tessera::cli::AddUserCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tessera::cli::CommandError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.code;
  }
  return 0;
}
