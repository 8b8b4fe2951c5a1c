#pragma once
// The engine ranks of `deepinfer serve --data-parallel N`: one `deepinfer serve` process per rank
// (each with its own model copy, engine, cache and prefix cache, on its own GPU), started and
// supervised by the front. A rank tells the front its port through an inherited pipe once it
// listens (`--ready-fd 3`); its stdout and stderr come to the front's log a line at a time,
// prefixed "[engine i] ". A rank that dies after it started is restarted (after 1 s, doubling to
// 30 s while it keeps dying) and is down meanwhile; one that dies before it ever listened fails
// the whole start with its last lines of output. A rank dies with its front (PR_SET_PDEATHSIG).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::server {

struct RankLaunch {
  std::string executable;                      // the deepinfer binary
  std::vector<std::vector<std::string>> args;  // per rank: everything after `deepinfer` (serve ...)
  std::vector<std::pair<std::string, std::string>> env;  // set in every rank besides the front's own
  std::function<void(const std::string&)> log;           // one line at a time, from any thread
};

struct RankState {
  bool up = false;  // listening; requests may go to it
  int port = 0;     // while up
  pid_t pid = 0;    // while running
  int64_t restarts = 0;
};

class RankProcesses {
 public:
  // Starts every rank and returns once each listens. Throws deepinfer::Error (naming the rank, its
  // exit status and its last lines of output) when one exits first; the others are stopped then.
  explicit RankProcesses(RankLaunch launch);
  ~RankProcesses();  // stop() with a 5 s grace
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  int ranks() const;
  RankState state(int rank) const;
  // Runs on a supervising thread whenever a rank goes down or comes (back) up.
  void set_on_change(std::function<void(int rank, bool up)> on_change);

  // No more restarts; SIGTERM to every rank (each drains its running requests for its own
  // --shutdown-timeout), SIGKILL to those still running after `grace`. Returns once all exited.
  void stop(std::chrono::milliseconds grace);

 private:
  struct Rank;
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace deepinfer::server
