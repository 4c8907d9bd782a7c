#pragma once
// The Redis-backed health store (issue 20): a HealthView and HealthSink over the local store (the
// state file, or memory) that shares what this process learns with every process on the same
// Redis, and folds in what they learn. Routing never waits on Redis: reads are the local copy,
// refreshed in the background; writes are batched (breaker transitions, high-water raises and
// filter pins go out at once, with a pub/sub notice).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/shared/codec.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute::shared {

class RedisLink;
struct Reply;

struct SharedOptions {
  RedisUrl url;
  TlsOptions tls;  // rediss://: the CA, client certificate, insecure (empty: the system store)
  std::string prefix = "rpcroute:";
  std::int64_t refresh_ms = 250;     // how often the local copy is refreshed and writes flushed
  std::int64_t budget_ms = 500;      // a command unanswered this long: Redis counts as down
  std::int64_t retry_ms = 1000;      // reconnect attempts while down
  std::int64_t latency_ms = 2000;    // how often the latency summaries are read back
  std::vector<std::string> secrets;  // scrubbed from anything logged (password, URL user info)
  bool announce = true;              // log the first connect (serve), not only changes
};

/// The options of a profile's `shared_state:`, or of `--shared-state URL` (which wins; its
/// password may come from $RPCROUTE_REDIS_PASSWORD). Empty URL: nullopt (no sharing).
[[nodiscard]] Result<std::optional<SharedOptions>> shared_options(const Profile& profile,
                                                                  const std::string& flag_url,
                                                                  const EnvLookup& env);

enum class LinkState { connecting, up, down };
[[nodiscard]] std::string_view link_state_name(LinkState s);

/// What /status and /metrics show.
struct SharedStatus {
  std::string url;  // display_url(): no credentials
  LinkState state = LinkState::connecting;
  std::int64_t since_ms = 0;         // wall time of the last state change
  std::uint64_t fallbacks = 0;       // times Redis went down and routing fell back to local state
  std::uint64_t syncs = 0;           // refresh rounds answered
  std::uint64_t adopted = 0;         // remote changes folded into the local copy
  std::uint64_t write_errors = 0;    // writes Redis refused (a full Redis: OOM)
  std::uint64_t script_reloads = 0;  // scripts Redis had forgotten (NOSCRIPT), loaded again
  std::string last_error;            // scrubbed
};

class SharedStore final : public HealthStore {
 public:
  using Log = std::function<void(const std::string&)>;

  SharedStore(asio::io_context& io, StateStore& local, const Clock& clock, SharedOptions options,
              Log log);
  ~SharedStore() override;
  SharedStore(const SharedStore&) = delete;
  SharedStore& operator=(const SharedStore&) = delete;

  /// Shares the providers and chains of `profile` (each profile once; later ones join too).
  void watch(const Profile& profile);
  /// Connects and starts the refresh timer.
  void start();
  /// Closes the links and stops the timer (pending writes are dropped).
  void stop();
  /// One-shot commands, with the io_context not running: connects, runs the loop until one
  /// refresh is answered (what other hosts learned is in the local copy) or `budget_ms` passed,
  /// and disconnects, so that the command's own loop can end when its work is done.
  void warm_up(std::int64_t budget_ms);
  /// The same after the command: what it recorded is written (and read back), within `budget_ms`.
  void flush_now(std::int64_t budget_ms);

  void record(Event event, const HealthConfig& health) override;
  [[nodiscard]] const ProviderState* provider(std::string_view key) const override {
    return local_.provider(key);
  }
  [[nodiscard]] const ChainState* chain(std::string_view key) const override {
    return local_.chain(key);
  }
  [[nodiscard]] const FilterPin* filter(std::string_view key) const override {
    return local_.filter(key);
  }

  [[nodiscard]] const SharedStatus& status() const { return status_; }
  [[nodiscard]] StateStore& local() { return local_; }

 private:
  struct Watched {
    HealthConfig health;
    std::optional<Quota> quota;
    std::int64_t breaker_t = 0;     // the newest breaker transition known (ours or adopted)
    std::int64_t trial_for_ms = 0;  // the half-open deadline a trial lease was asked for
    double drawn = 0;               // quota tokens drawn outside a lease since the last draw
    // The quota lease (codec.hpp): tokens taken out of the shared bucket, spent only here.
    bool leased = false;              // spends from a lease, not from a refilling local bucket
    bool asking = false;              // a lease round is under way
    double held = 0;                  // tokens held (negative: a batch overdrew the lease)
    std::int64_t lease_until_ms = 0;  // the lease lapses then (wall time, this host's clock)
    std::int64_t next_ask_us = 0;     // the shared bucket was empty: no ask before then
    int target = 1;                   // the lease's size (lease_target)
    int hosts = 1;                    // hosts leasing from the bucket, as Redis last said
    double spent = 0;                 // tokens spent since the rate was last estimated
    double rate = 0;                  // tokens/s this host spends (spend_rate)
    std::int64_t rate_at_us = 0;
    // Waiting to be written:
    bool breaker_dirty = false;
    std::int64_t rate_limited_until_ms = 0;
    std::optional<Height> height;
    std::optional<Cordon> cordon;
    std::optional<LogLimit> log_limit;
    // Latency counts not written yet, per window and catalogue_slot() (at most the windows Redis
    // keeps).
    std::map<std::int64_t, std::map<std::string, LatencyCounts, std::less<>>> latency_out;
    // The windows of a read under way.
    std::map<std::string, LatencyCounts, std::less<>> latency_in;
    // The last adopted from Redis, put back when a save reloads the local state:
    std::int64_t remote_breaker_t = 0;
    Breaker remote_breaker;
    std::int64_t remote_rate_limited_until_ms = 0;
    Height remote_height;
    std::optional<Bucket> remote_bucket;
    Cordon remote_cordon;
    LogLimit remote_log_limit;
    std::map<std::string, SharedLatency, std::less<>> remote_latency;
  };
  struct WatchedChain {
    std::uint64_t generation = 0;
    std::optional<HighWaterEvent> pending;
    std::uint64_t remote_generation = 0;
    Height remote;
  };

  Watched& watched(std::string_view key, const HealthConfig& health);
  void record_high_water(const HighWaterEvent& e, const HealthConfig& health);
  void connect();
  void handshake();
  void lost(const std::string& why);
  void went_up();
  void tick();
  void arm_timer();
  void flush();
  void refresh();
  void write_provider(const std::string& key, Watched& w);
  void write_chain(const std::string& key, WatchedChain& c);
  void write_filter(const std::string& key, const FilterPin& pin);
  void write_latency(const std::string& key, Watched& w);
  void read_latency(const std::string& key);
  void adopt_latency(const std::string& key, const Reply& r, std::int64_t end_ms, bool last);
  static void add_latency(Watched& w, std::string_view method, const Sample& s);
  void on_message(const Reply& r);
  void read_provider(const std::string& key);
  void adopt_provider(const std::string& key, const Reply& r);
  void read_chain(const std::string& key);
  void adopt_chain(const std::string& key, const Reply& r);
  void draw_quota(const std::string& key, Watched& w);
  /// The lease's tokens become the local bucket's (Redis away, a lease refused, the store stops).
  void drop_lease(const std::string& key, Watched& w);
  void arm_lease_timer(std::int64_t at_us);
  void lease_trials();
  void check_write(const Reply& r);
  void set_state(LinkState s, const std::string& why);
  /// Puts what was adopted from Redis back into `state` (after a save replaced it).
  void reapply(State& state);
  void run_until(const std::function<bool()>& done, std::int64_t budget_ms);
  ProviderState& local_provider(State& state, const std::string& key, const Watched& w);
  [[nodiscard]] bool up() const { return status_.state == LinkState::up; }
  [[nodiscard]] bool running_links() const;
  [[nodiscard]] std::string scrub(std::string text) const;
  [[nodiscard]] std::string_view script(int which) const;
  /// EVALSHA when the script is loaded, else EVAL (its text): the first round after a connect, or
  /// again after NOSCRIPT. `notice`: published after the write lands (again after a retried EVAL).
  void eval(int which, std::vector<std::string_view> args, std::function<void(const Reply&)> fn,
            const std::string& notice = {});
  /// NOSCRIPT: Redis forgot script `which`; EVAL until one SCRIPT LOAD takes its SHA back.
  void reload_script(int which);

  asio::io_context& io_;
  StateStore& local_;
  const Clock& clock_;
  SharedOptions options_;
  Log log_;
  std::unique_ptr<RedisLink> commands_;
  std::unique_ptr<RedisLink> events_;  // the pub/sub subscription
  asio::steady_timer timer_;
  asio::steady_timer lease_timer_;  // asks again when an empty shared bucket holds a token
  std::int64_t lease_timer_at_us_ = 0;
  std::map<std::string, Watched, std::less<>> providers_;
  std::map<std::string, WatchedChain, std::less<>> chains_;
  std::set<std::string, std::less<>> profiles_;
  std::map<std::string, FilterPin, std::less<>> remote_filters_;  // at most kMaxFilters
  std::string shas_[4];     // SCRIPT LOAD answers: bucket, provider, high-water, latency
  bool reloading_[4] = {};  // a SCRIPT LOAD after NOSCRIPT awaits its answer
  std::int64_t next_connect_us_ = 0;
  std::uint64_t rounds_answered_ = 0;
  std::int64_t next_latency_us_ = 0;  // when the latency summaries are read next
  bool running_ = false;
  bool leasing_ = true;  // serve: quota leases; one-shot commands draw as is
  bool logged_write_error_ = false;
  std::string host_id_;
  SharedStatus status_;
};

}  // namespace rpcroute::shared
