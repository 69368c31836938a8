// `tessera apply -f` (files, directories, multi-document YAML, JSON lists, stdin; --dry-run),
// `tessera wait KIND NAME --for COND --timeout D`, and `tessera completion bash`.
#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/client.h"
#include "cli/documents.h"
#include "cli/resource_kinds.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// Every document of every -f, in order; nothing is sent before all of them are read.
std::vector<ManifestDocument> ReadManifests(const std::vector<std::string>& paths) {
  std::vector<ManifestDocument> out;
  auto add = [&out](const std::string& text, const std::string& source) {
    auto docs = SplitManifests(text, source);
    if (!docs.ok()) throw CommandError(docs.status().message());
    for (auto& d : *docs) out.push_back(std::move(d));
  };
  for (const std::string& path : paths) {
    std::error_code ec;
    if (path != "-" && fs::is_directory(path, ec)) {
      std::vector<std::string> files;
      for (const auto& entry : fs::directory_iterator(path, ec))
        if (entry.is_regular_file() && IsManifestFileName(entry.path().filename().string()))
          files.push_back(entry.path().string());
      if (ec) throw CommandError(path + ": cannot list this directory: " + ec.message(), 1);
      std::sort(files.begin(), files.end());  // kubectl's order: by name
      if (files.empty())
        throw CommandError(path + ": no *.yaml, *.yml or *.json files in this directory");
      for (const std::string& f : files) add(ReadFileOrStdin(f), f);
    } else {
      add(ReadFileOrStdin(path), path == "-" ? "standard input" : path);
    }
  }
  if (out.empty()) throw CommandError("-f: no documents (only empty documents or comments)");
  return out;
}

void Apply(const ClientFlags& flags, const std::vector<std::string>& paths, bool dry_run) {
  const std::vector<ManifestDocument> docs = ReadManifests(paths);
  auto client = Connect(flags);
  std::vector<std::string> applied;
  for (const ManifestDocument& doc : docs) {
    Json j;
    try {
      j = Call(*client, net::Method::kPost,
               std::string("/api/v1/apply") + (dry_run ? "?dryRun=true" : ""), doc.text);
    } catch (const CommandError& e) {
      std::string message = doc.source + ": " + e.what();
      if (docs.size() > 1)
        message += applied.empty() ? "\nnothing was applied"
                                   : "\n" + std::to_string(applied.size()) + " of " +
                                         std::to_string(docs.size()) + " applied before it (" +
                                         [&] {
                                           std::string names;
                                           for (const auto& a : applied)
                                             names += (names.empty() ? "" : ", ") + a;
                                           return names;
                                         }() +
                                         "); the rest were not sent";
      throw CommandError(message, e.code);
    }
    const std::string object =
        Lower(j.value("kind", "TrainJob")) + "/" + j["metadata"].value("name", "");
    std::cout << object << " " << (j.value("created", true) ? "created" : "configured")
              << (dry_run ? " (dry run)" : "") << "\n"
              << std::flush;
    // Settings the head accepted but that cannot take effect (docs/admission.md), as kubectl
    // prints an API server's warnings: on standard error, the exit status unchanged.
    if (auto w = j.find("warnings"); w != j.end() && w->is_array())
      for (const Json& warning : *w)
        std::cerr << "Warning: " << object << ": " << warning.value("field", "") << ": "
                  << warning.value("message", "") << "\n";
    applied.push_back(object);
  }
}

// --for: "phase=Succeeded", "delete", or FIELD=VALUE with FIELD a dot path under status
// ("state=Ready", "reason=Admitted"); values compare without regard to case.
struct Condition {
  bool deleted = false;
  std::vector<std::string> path;
  std::string value;
  std::string text;
};

Condition ParseCondition(const std::string& text) {
  Condition c;
  c.text = text;
  if (text == "delete") {
    c.deleted = true;
    return c;
  }
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw CommandError("--for: '" + text +
                       "' is not a condition; write phase=Succeeded, FIELD=VALUE (a status field, "
                       "e.g. state=Ready) or delete");
  std::string field = text.substr(0, eq);
  if (field.rfind("status.", 0) == 0) field = field.substr(7);
  size_t start = 0;
  while (true) {
    const size_t dot = field.find('.', start);
    c.path.push_back(field.substr(start, dot == std::string::npos ? dot : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  c.value = text.substr(eq + 1);
  return c;
}

std::string StatusValue(const Json& object, const std::vector<std::string>& path) {
  const Json* at = &object["status"];
  for (const std::string& key : path) {
    if (!at->is_object() || !at->contains(key)) return "";
    at = &(*at)[key];
  }
  return at->is_string() ? at->get<std::string>() : at->dump();
}

// Phases a workload never leaves; waiting for another one there can only time out.
bool IsFinal(const std::string& phase) {
  return phase == "Succeeded" || phase == "Failed" || phase == "Expired";
}

void Wait(const ClientFlags& flags, const std::string& kind, const std::string& name,
          const std::string& condition_text, const std::string& timeout_text) {
  const Condition cond = ParseCondition(condition_text);
  auto timeout = ParseFlagDuration("--timeout", timeout_text);
  if (!timeout.ok()) throw CommandError(timeout.status().message());
  const std::string path = KindPath(kind);
  const std::string object = KindObjectPrefix(path) + "/" + name;
  if (path == "hosts" || path == "events")
    throw CommandError("wait: " + kind +
                       " has nothing to wait for; wait for a job, service or "
                       "reservation");
  auto client = Connect(flags);
  const std::string in_namespace = NamespaceQuery(flags, path);
  {
    auto r = client->Request(net::Method::kGet, "/api/v1/" + path + "/" + name + in_namespace);
    if (!r.ok()) throw CommandError("cannot reach the head: " + r.status().message(), 1);
    if (r->status == 404) {
      if (cond.deleted) {
        std::cout << object << " deleted\n";
        return;
      }
      throw CommandError(object + " not found", 1);
    }
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, timed_out = false;
  std::thread timer([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::milliseconds(*timeout), [&] { return done; })) {
      timed_out = true;
      client->Cancel();
    }
  });
  bool met = false;
  // last: the watched field's value; why: the object's reason and message then, so a timeout
  // says what it waits for ("Pending; LocalQueueNotFound: LocalQueue default does not exist...").
  std::string last, why, failure;
  Status s = client->Stream(
      net::Method::kGet, "/api/v1/" + path + "?watch=true" + NamespaceQuery(flags, path, '&'),
      [&](std::string_view line) {
        Json change = Json::parse(line, nullptr, false);
        if (change.is_discarded() || !change.contains("object")) return true;
        const std::string type = change.value("type", "");
        const Json& o = change["object"];
        if (type == "ERROR") {
          failure = o.value("message", "the head ended the watch");
          return false;
        }
        if (!o.contains("metadata") || o["metadata"].value("name", "") != name) return true;
        if (type == "DELETED") {
          met = cond.deleted;
          if (!met) failure = object + " was deleted";
          return false;
        }
        if (cond.deleted) return true;
        const std::string value = StatusValue(o, cond.path);
        last = value;
        const Json status = o.value("status", Json::object());
        std::string reason, message;
        if (status.is_object()) {
          reason = status.value("pendingReason", "");
          if (reason.empty()) reason = status.value("reason", "");
          message = status.value("message", "");
        }
        if (reason == value) reason.clear();  // "Pending; Pending: ..." says it twice
        why = reason + (!reason.empty() && !message.empty() ? ": " : "") + message;
        if (Lower(value) == Lower(cond.value)) {
          met = true;
          return false;
        }
        const std::string phase = StatusValue(o, {"phase"});
        if (cond.path == std::vector<std::string>{"phase"} && IsFinal(phase)) {
          failure = object + " is " + phase + ", so never " + cond.value;
          const Json& st = o["status"];
          if (!st.value("reason", "").empty())
            failure += " (" + st.value("reason", "") + ": " + st.value("message", "") + ")";
          return false;
        }
        return true;
      });
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_one();
  timer.join();
  if (met) {
    std::cout << object << (cond.deleted ? " deleted" : " condition met (" + cond.text + ")")
              << "\n";
    return;
  }
  if (!failure.empty()) throw CommandError(failure, 1);
  if (timed_out) {
    std::string now = last;
    if (!why.empty()) now += (now.empty() ? "" : "; ") + why;
    throw CommandError("timed out after " + timeout_text + " waiting for " + object + " " +
                           cond.text + (now.empty() ? "" : " (now " + now + ")"),
                       1);
  }
  throw CommandError("watching " + object + ": " +
                         (s.ok() ? std::string("the head ended the watch") : s.message()),
                     1);
}

// A bash completion script from the app's own subcommands and options, so it never falls
// behind the command: `source <(tessera completion bash)`.
std::string BashCompletion(const CLI::App& app) {
  std::string subs, cases;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string name = sub->get_name();
    subs += (subs.empty() ? "" : " ") + name;
    std::string opts;
    for (const CLI::Option* o : sub->get_options()) {
      for (const std::string& l : o->get_lnames()) opts += " --" + l;
      for (const std::string& s : o->get_snames()) opts += " -" + s;
    }
    cases += "    " + name + ") opts=\"" + opts.substr(opts.empty() ? 0 : 1) + "\" ;;\n";
  }
  const std::string kinds = KindNames();
  return "# bash completion for tessera: source <(tessera completion bash)\n"
         "_tessera() {\n"
         "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
         "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
         "    COMPREPLY=($(compgen -W \"" +
         subs +
         "\" -- \"$cur\")); return\n"
         "  fi\n"
         "  local sub=${COMP_WORDS[1]} opts=\"\"\n"
         "  case \"$prev\" in\n"
         "    -f|--filename|--state-dir|--token-file) COMPREPLY=($(compgen -f -- \"$cur\")); "
         "return ;;\n"
         "    -o|--output) COMPREPLY=($(compgen -W \"table wide json yaml name\" -- \"$cur\")); "
         "return ;;\n"
         "    --for) COMPREPLY=($(compgen -W \"phase=Succeeded phase=Running phase=Ready "
         "delete\" -- \"$cur\")); return ;;\n"
         "  esac\n"
         "  case \"$sub\" in\n" +
         cases +
         "  esac\n"
         "  case \"$sub\" in\n"
         "    get|describe|delete|wait|explain|logs)\n"
         "      if [ \"$COMP_CWORD\" -eq 2 ]; then\n"
         "        COMPREPLY=($(compgen -W \"" +
         kinds +
         "\" -- \"$cur\")); return\n"
         "      fi ;;\n"
         "  esac\n"
         "  COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
         "}\n"
         "complete -o default -F _tessera tessera\n";
}

}  // namespace

void AddApplyWaitCommands(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand(
        "apply",
        "Create or update resources from YAML or JSON: files, directories (*.yaml, *.yml, "
        "*.json by name), multi-document YAML, JSON lists, - for standard input; applied in "
        "order, stopping at the first refusal");
    auto flags = std::make_shared<ClientFlags>();
    auto files = std::make_shared<std::vector<std::string>>();
    auto dry_run = std::make_shared<bool>(false);
    cmd->add_option("-f,--filename", *files, "a manifest, a directory, or - (repeatable)")
        ->required();
    cmd->add_flag("--dry-run", *dry_run, "validate each document on the head; store nothing");
    flags->Add(cmd);
    cmd->callback([flags, files, dry_run] { Apply(*flags, *files, *dry_run); });
  }
  {
    auto* cmd = app.add_subcommand(
        "wait", "Wait until a job, service or reservation meets a condition (or is deleted)");
    auto flags = std::make_shared<ClientFlags>();
    auto kind = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto condition = std::make_shared<std::string>();
    auto timeout = std::make_shared<std::string>("30s");
    cmd->add_option("kind", *kind, "job, service or reservation")->required();
    cmd->add_option("name", *name, "its name")->required();
    cmd->add_option("--for", *condition,
                    "phase=Succeeded, FIELD=VALUE (a status field, e.g. state=Ready) or delete")
        ->required();
    cmd->add_option("--timeout", *timeout, "give up after this long (30s, 5m, 1h)")
        ->capture_default_str();
    flags->Add(cmd);
    flags->AddNamespace(cmd, false);
    cmd->callback([flags, kind, name, condition, timeout] {
      Wait(*flags, *kind, *name, *condition, *timeout);
    });
  }
  {
    auto* cmd = app.add_subcommand("completion", "Print a shell completion script (bash)");
    auto shell = std::make_shared<std::string>();
    cmd->add_option("shell", *shell, "bash")->required()->check(CLI::IsMember({"bash"}));
    cmd->callback([&app, shell] { std::cout << BashCompletion(app); });
  }
}

}  // namespace tessera::cli
