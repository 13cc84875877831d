// --partrain=auto at submit (see auto_spec.h).
#include "auto_spec.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#ifndef PARTRAIN_CLI_DEFAULT
#define PARTRAIN_CLI_DEFAULT "/usr/bin/partrain"
#endif

namespace partrain::spank {
namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::string default_partrain_cli() { return PARTRAIN_CLI_DEFAULT; }

std::string find_job_file(std::string_view text) {
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    for (size_t i = 0; i < w.size(); ++i) {
      const bool agent = w[i] == "partraind" || ends_with(w[i], "/partraind");
      const bool run = (w[i] == "partrain" || ends_with(w[i], "/partrain")) && i + 1 < w.size() && w[i + 1] == "run";
      if (!agent && !run) continue;
      for (size_t j = i + 1; j < w.size(); ++j) {
        std::string word = w[j];
        if (word.size() > 2 && (word.front() == '"' || word.front() == '\'') && word.back() == word.front()) {
          word = word.substr(1, word.size() - 2);
        }
        if (ends_with(word, ".toml")) return word;
      }
    }
  }
  return "";
}

Result<std::vector<std::string>> auto_command(const std::string& job_file, const AllocationFacts& facts,
                                              const PluginArgs& args) {
  if (args.hardware.empty()) {
    return Status::invalid("partrain: --partrain=auto needs the cluster's hardware profile: the admin adds "
                           "hardware=NAME (e.g. H100-SXM) to the plugin's plugstack.conf line; or give the "
                           "layout, e.g. --partrain=tp4,pp2");
  }
  if (job_file.empty()) {
    return Status::invalid("partrain: --partrain=auto: no job file found: the batch script or command must run "
                           "`partraind JOB.toml` or `partrain run JOB.toml`; or give the layout, e.g. "
                           "--partrain=dp8");
  }
  const int nodes = facts.nodes.value_or(1);
  const std::optional<int> gpus = facts.gpus_per_node ? facts.gpus_per_node : facts.tasks_per_node;
  if (!gpus || *gpus < 1) {
    return Status::invalid("partrain: --partrain=auto needs the GPUs per node: add --gpus-per-node=G (or "
                           "--ntasks-per-node=G for CPU ranks)");
  }
  return std::vector<std::string>{args.partrain_cli, "plan", job_file, "--auto", "--nodes", std::to_string(nodes),
                                  "--gpus-per-node", std::to_string(*gpus), "--hardware", args.hardware};
}

Result<std::string> parse_auto_choice(std::string_view output) {
  constexpr std::string_view kMark = "--partrain=auto chose --partrain=";
  const size_t at = output.find(kMark);
  if (at == std::string_view::npos) {
    return Status::invalid("partrain: --partrain=auto: the planner gave no choice: " +
                           std::string(output.substr(0, 400)));
  }
  const size_t begin = at + kMark.size();
  size_t end = begin;
  while (end < output.size() && output[end] != ':' && output[end] != ' ' && output[end] != '\n') ++end;
  if (end == begin) return Status::invalid("partrain: --partrain=auto: the planner's choice is empty");
  return std::string(output.substr(begin, end - begin));
}

Result<std::string> run_planner(const std::vector<std::string>& argv, const PluginArgs& args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::invalid(std::string("partrain: pipe: ") + std::strerror(errno));
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  // Everything the child needs is made before fork: after it only exec and write run.
  const std::string site = "PARTRAIN_SITE_CONFIG=" + args.site_config;
  std::vector<char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "PARTRAIN_SITE_CONFIG=", 21) != 0) envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(site.c_str()));
  envp.push_back(nullptr);
  const std::string cannot = "partrain: cannot run " + argv[0] + " (plugstack partrain_cli= names the partrain "
                             "command)\n";
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::invalid(std::string("partrain: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {  // the child: stdout and stderr into the pipe, then the planner
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execve(cargv[0], cargv.data(), envp.data());
    (void)!::write(2, cannot.data(), cannot.size());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < (64u << 10)) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return Status::invalid(out.empty() ? "partrain: --partrain=auto: " + argv[0] + " failed" : out);
  }
  return out;
}

}  // namespace partrain::spank
