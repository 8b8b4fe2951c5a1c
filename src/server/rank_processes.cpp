#include "server/rank_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace deepinfer::server {
namespace {

constexpr std::size_t kTailLines = 40;
constexpr std::chrono::milliseconds kFirstBackoff{1000};
constexpr std::chrono::milliseconds kLongestBackoff{30'000};
// A rank that ran this long before dying starts again after the first back-off, not a longer one.
constexpr std::chrono::seconds kStableRun{60};

std::string exit_description(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Reads `fd` to its end, one line at a time.
void for_each_line(int fd, const std::function<void(const std::string&)>& line) {
  std::string pending;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos;) {
      line(pending.substr(0, end));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty()) line(pending);
}

}  // namespace

struct RankProcesses::Rank {
  int index = 0;
  std::vector<std::string> args;
  std::thread supervisor;
  // Under Shared::mutex:
  RankState state;
  std::deque<std::string> tail;  // its last lines of output
  bool started = false;          // listened at least once
  std::string start_failure;     // it exited before it ever listened
};

struct RankProcesses::Shared {
  RankLaunch launch;
  std::vector<std::unique_ptr<Rank>> ranks;
  mutable std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::function<void(int, bool)> on_change;

  void log(const std::string& line) const {
    if (launch.log) launch.log(line);
  }

  // posix_spawn: fds 0 /dev/null, 1 and 2 the output pipe, 3 the ready pipe, nothing else (the
  // front's sockets stay with the front); signals unblocked and at their defaults.
  pid_t spawn(const Rank& rank, int& ready_fd, int& output_fd) const {
    int ready[2], output[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) fail("engine rank ", rank.index, ": pipe: ", std::strerror(errno));
    if (::pipe2(output, O_CLOEXEC) != 0) {
      ::close(ready[0]);
      ::close(ready[1]);
      fail("engine rank ", rank.index, ": pipe: ", std::strerror(errno));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, output[1], 1);
    posix_spawn_file_actions_adddup2(&actions, output[1], 2);
    posix_spawn_file_actions_adddup2(&actions, ready[1], 3);
    posix_spawn_file_actions_addclosefrom_np(&actions, 4);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int signal : {SIGTERM, SIGINT, SIGPIPE, SIGHUP}) sigaddset(&defaults, signal);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    std::vector<std::string> argv_text = {launch.executable};
    argv_text.insert(argv_text.end(), rank.args.begin(), rank.args.end());
    argv_text.insert(argv_text.end(), {"--ready-fd", "3"});
    std::vector<char*> argv;
    for (std::string& arg : argv_text) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_text;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string_view text(*entry);
      const bool replaced = std::any_of(launch.env.begin(), launch.env.end(), [&](const auto& pair) {
        return text.substr(0, pair.first.size() + 1) == pair.first + "=";
      });
      if (!replaced && text.rfind("DEEPINFER_FRONT_PID=", 0) != 0) env_text.emplace_back(text);
    }
    for (const auto& [name, value] : launch.env) env_text.push_back(name + "=" + value);
    env_text.push_back("DEEPINFER_FRONT_PID=" + std::to_string(::getpid()));
    std::vector<char*> envp;
    for (std::string& entry : env_text) envp.push_back(entry.data());
    envp.push_back(nullptr);

    pid_t pid = 0;
    const int error = ::posix_spawn(&pid, launch.executable.c_str(), &actions, &attributes, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    ::close(ready[1]);
    ::close(output[1]);
    if (error != 0) {
      ::close(ready[0]);
      ::close(output[0]);
      fail("engine rank ", rank.index, ": cannot start ", launch.executable, ": ", std::strerror(error));
    }
    ready_fd = ready[0];
    output_fd = output[0];
    return pid;
  }

  // The rank's whole life: start, wait for its port, wait for its exit, start again.
  void supervise(Rank& rank) {
    std::chrono::milliseconds backoff = kFirstBackoff;
    for (;;) {
      int ready_fd = -1, output_fd = -1;
      pid_t pid = 0;
      try {
        pid = spawn(rank, ready_fd, output_fd);
      } catch (const Error& error) {
        std::lock_guard lock(mutex);
        rank.start_failure = error.what();
        changed.notify_all();
        return;
      }
      {
        std::lock_guard lock(mutex);
        rank.state.pid = pid;
        if (stopping) ::kill(pid, SIGTERM);  // stop() came while it was being started
      }
      std::thread reader([this, &rank, output_fd] {
        for_each_line(output_fd, [&](const std::string& line) {
          log("[engine " + std::to_string(rank.index) + "] " + line);
          std::lock_guard lock(mutex);
          rank.tail.push_back(line);
          if (rank.tail.size() > kTailLines) rank.tail.pop_front();
        });
        ::close(output_fd);
      });
      std::string reported;
      for_each_line(ready_fd, [&](const std::string& line) { reported += line; });
      ::close(ready_fd);
      const int port = std::atoi(reported.c_str());
      const auto began = std::chrono::steady_clock::now();
      if (port > 0 && port < 65536) {
        {
          std::lock_guard lock(mutex);
          rank.state.up = true;
          rank.state.port = port;
          rank.started = true;
          changed.notify_all();
        }
        log("deepinfer serve: engine rank " + std::to_string(rank.index) + " (pid " + std::to_string(pid) +
            ") listening on 127.0.0.1:" + std::to_string(port));
        notify(rank.index, true);
      }
      // Wait without reaping, so stop() never signals a pid the system may have reused.
      siginfo_t info{};
      while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
      }
      bool was_up = false, stop_now = false;
      std::string exit_line;
      {
        std::lock_guard lock(mutex);
        was_up = rank.state.up;
        rank.state.up = false;
        rank.state.port = 0;
        rank.state.pid = 0;
        int status = 0;
        ::waitpid(pid, &status, 0);
        exit_line = "engine rank " + std::to_string(rank.index) + " (pid " + std::to_string(pid) + ") exited (" +
                    exit_description(status) + ")";
        stop_now = stopping;
      }
      reader.join();  // its last lines are in the tail before anyone reads the failure
      const bool first_start_failed = !rank.started;
      {
        std::lock_guard lock(mutex);
        if (first_start_failed) rank.start_failure = exit_line + " before it listened";
        changed.notify_all();
      }
      if (!first_start_failed && !stop_now)
        log("deepinfer serve: " + exit_line + "; its requests failed; restarting it in " +
            std::to_string(backoff.count() / 1000) + " s");
      if (was_up) notify(rank.index, false);
      if (first_start_failed || stop_now) return;
      std::unique_lock lock(mutex);
      if (changed.wait_for(lock, backoff, [this] { return stopping; })) return;
      ++rank.state.restarts;
      backoff = std::chrono::steady_clock::now() - began > kStableRun ? kFirstBackoff
                                                                       : std::min(backoff * 2, kLongestBackoff);
    }
  }

  void notify(int rank, bool up) {
    std::function<void(int, bool)> callback;
    {
      std::lock_guard lock(mutex);
      callback = on_change;
    }
    if (callback) callback(rank, up);
  }

  void stop(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mutex);
      stopping = true;
      for (const auto& rank : ranks)
        if (rank->state.pid > 0) ::kill(rank->state.pid, SIGTERM);
      changed.notify_all();
    }
    {
      std::unique_lock lock(mutex);
      const bool exited = changed.wait_for(lock, grace, [this] {
        return std::all_of(ranks.begin(), ranks.end(), [](const auto& rank) { return rank->state.pid == 0; });
      });
      if (!exited)
        for (const auto& rank : ranks)
          if (rank->state.pid > 0) {
            log("deepinfer serve: engine rank " + std::to_string(rank->index) + " did not stop in time; killing it");
            ::kill(rank->state.pid, SIGKILL);
          }
    }
    for (const auto& rank : ranks)
      if (rank->supervisor.joinable()) rank->supervisor.join();
  }
};

RankProcesses::RankProcesses(RankLaunch launch) : shared_(std::make_shared<Shared>()) {
  if (launch.args.empty()) fail("data parallelism: no engine ranks to start");
  shared_->launch = std::move(launch);
  Shared& shared = *shared_;
  for (std::size_t i = 0; i < shared.launch.args.size(); ++i) {
    auto rank = std::make_unique<Rank>();
    rank->index = static_cast<int>(i);
    rank->args = shared.launch.args[i];
    shared.ranks.push_back(std::move(rank));
  }
  for (auto& rank : shared.ranks) rank->supervisor = std::thread([&shared, &rank = *rank] { shared.supervise(rank); });
  std::string failure;
  {
    std::unique_lock lock(shared.mutex);
    shared.changed.wait(lock, [&] {
      bool all_started = true;
      for (const auto& rank : shared.ranks) {
        if (!rank->start_failure.empty()) return true;
        all_started &= rank->started;
      }
      return all_started;
    });
    for (const auto& rank : shared.ranks) {
      if (rank->start_failure.empty()) continue;
      failure = rank->start_failure;
      if (!rank->tail.empty()) {
        failure += "; its last output:";
        for (const std::string& line : rank->tail) failure += "\n  " + line;
      }
      break;
    }
  }
  if (!failure.empty()) {
    shared.stop(std::chrono::milliseconds(5000));
    throw Error(failure);
  }
}

RankProcesses::~RankProcesses() { shared_->stop(std::chrono::milliseconds(5000)); }

int RankProcesses::ranks() const { return static_cast<int>(shared_->ranks.size()); }

RankState RankProcesses::state(int rank) const {
  std::lock_guard lock(shared_->mutex);
  if (rank < 0 || rank >= ranks()) fail("data parallelism: no engine rank ", rank);
  return shared_->ranks[static_cast<std::size_t>(rank)]->state;
}

void RankProcesses::set_on_change(std::function<void(int, bool)> on_change) {
  std::lock_guard lock(shared_->mutex);
  shared_->on_change = std::move(on_change);
}

void RankProcesses::stop(std::chrono::milliseconds grace) { shared_->stop(grace); }

}  // namespace deepinfer::server
