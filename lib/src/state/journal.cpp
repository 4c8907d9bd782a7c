#include "journal.hpp"

#include <array>
#include <climits>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace rpcroute::journal {

// A record holds every field of these (encode/decode below). A field added to one of them must be
// journaled too, or a one-shot call's change of it is lost: these sizes stop the build until then.
#if defined(__x86_64__) && defined(__GLIBCXX__)
static_assert(sizeof(HealthConfig) == 48, "a new HealthConfig field: journal it");
static_assert(sizeof(AttemptEvent) == 104, "a new AttemptEvent field: journal it");
static_assert(sizeof(Sample) == 24, "a new Sample field: journal it");
static_assert(sizeof(Height) == 16, "a new Height field: journal it");
static_assert(sizeof(ProbeFindings) == 56, "a new ProbeFindings field: journal it");
static_assert(sizeof(QuotaEvent) == 64, "a new QuotaEvent field: journal it");
static_assert(sizeof(LagMark) == 24, "a new LagMark field: journal it");
static_assert(sizeof(ArchivalSeen) == 16, "a new ArchivalSeen field: journal it");
static_assert(sizeof(HighWaterEvent) == 56, "a new HighWaterEvent field: journal it");
static_assert(sizeof(FilterPin) == 40, "a new FilterPin field: journal it");
static_assert(sizeof(LogLimit) == 16, "a new LogLimit field: journal it");
static_assert(sizeof(Cordon) == 56, "a new Cordon field: journal it");
#endif

namespace {

constexpr std::uint32_t kPoly = 0x82F63B78;  // CRC-32C, reflected

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

std::uint32_t crc_soft(const unsigned char* p, std::size_t n, std::uint32_t c) {
  while (n-- > 0) c = kTable[(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc_hw(const unsigned char* p, std::size_t n,
                                                       std::uint32_t c) {
  std::uint64_t wide = c;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    wide = _mm_crc32_u64(wide, v);
  }
  c = static_cast<std::uint32_t>(wide);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return c;
}
bool have_sse42() {
  static const bool have = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2") != 0);
  return have;
}
#endif

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

/// The checksum of one record: its generation, its length and its payload.
std::uint32_t record_crc(std::uint64_t generation, std::string_view length,
                         std::string_view payload) {
  std::string gen;
  put_u64(gen, generation);
  return crc32c(payload, crc32c(length, crc32c(gen)));
}

// --- payload encoding: LEB128 varints (zigzag for signed), raw little-endian doubles,
// length-prefixed strings.

class Out {
 public:
  void u8(std::uint8_t v) { s_.push_back(static_cast<char>(v)); }
  void uv(std::uint64_t v) {
    for (; v >= 0x80; v >>= 7) s_.push_back(static_cast<char>((v & 0x7F) | 0x80));
    s_.push_back(static_cast<char>(v));
  }
  void iv(std::int64_t v) {
    uv((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
  }
  void f64(double v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, 8);
    put_u64(s_, bits);
  }
  void str(std::string_view v) {
    uv(v.size());
    s_.append(v);
  }
  void opt_bool(const std::optional<bool>& v) { u8(v ? (*v ? 1 : 0) : 2); }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

/// Reads what Out wrote; any overrun or value Out would not write makes it bad (and it then yields
/// zeros), checked once at the end.
class In {
 public:
  explicit In(std::string_view s) : s_(s) {}
  [[nodiscard]] bool ok() const { return ok_ && pos_ == s_.size(); }
  std::uint8_t u8() {
    if (pos_ >= s_.size()) return bad<std::uint8_t>();
    return static_cast<std::uint8_t>(s_[pos_++]);
  }
  std::uint64_t uv() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= s_.size()) return bad<std::uint64_t>();
      const auto b = static_cast<std::uint8_t>(s_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return bad<std::uint64_t>();
  }
  std::int64_t iv() {
    const auto z = uv();
    return static_cast<std::int64_t>((z >> 1) ^ (~(z & 1) + 1));
  }
  int i32() {
    const auto v = iv();
    if (v < INT_MIN || v > INT_MAX) return bad<int>();
    return static_cast<int>(v);
  }
  double f64() {
    if (s_.size() - pos_ < 8) return bad<double>();
    const auto bits = get_le(s_.data() + pos_, 8);
    pos_ += 8;
    double v = 0;
    std::memcpy(&v, &bits, 8);
    if (!std::isfinite(v)) return bad<double>();
    return v;
  }
  std::string str() {
    const auto n = uv();
    if (n > s_.size() - pos_) return bad<std::string>();
    std::string out(s_.substr(pos_, n));
    pos_ += n;
    return out;
  }
  std::optional<bool> opt_bool() {
    switch (u8()) {
      case 0:
        return false;
      case 1:
        return true;
      case 2:
        return std::nullopt;
      default:
        return bad<std::optional<bool>>();
    }
  }
  /// A count of items that take at least one byte each.
  std::size_t count() {
    const auto n = uv();
    if (n > s_.size() - pos_) return bad<std::size_t>();
    return n;
  }
  template <class E>
  E enumerated(E last) {
    const auto v = u8();
    if (v > static_cast<std::uint8_t>(last)) return bad<E>();
    return static_cast<E>(v);
  }

 private:
  template <class T>
  T bad() {
    ok_ = false;
    pos_ = s_.size();
    return T{};
  }
  std::string_view s_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

enum Has : std::uint8_t {
  kHeight = 1,
  kProbe = 2,
  kQuota = 4,
  kLag = 8,
  kArchival = 16,
  kCordon = 32,
  kLogLimit = 64,
};

void put_health(Out& o, const HealthConfig& h) {
  const auto& b = h.circuit_breaker;
  o.iv(b.failure_threshold);
  o.iv(b.recovery_timeout_ms);
  o.iv(b.max_recovery_timeout_ms);
  o.iv(b.success_threshold);
  o.iv(b.half_open_max_inflight);
  o.f64(b.jitter);
  o.iv(h.rate_limit_default_ms);
}
HealthConfig get_health(In& in) {
  HealthConfig h;
  auto& b = h.circuit_breaker;
  b.failure_threshold = in.i32();
  b.recovery_timeout_ms = in.iv();
  b.max_recovery_timeout_ms = in.iv();
  b.success_threshold = in.i32();
  b.half_open_max_inflight = in.i32();
  b.jitter = in.f64();
  h.rate_limit_default_ms = in.iv();
  return h;
}

void put_provider(Out& o, const PendingEvents::PerProvider& pp) {
  put_health(o, pp.health);
  o.uv(pp.attempts.size());
  for (const auto& a : pp.attempts) {
    o.iv(a.t_ms);
    o.u8(static_cast<std::uint8_t>(a.cls));
    o.str(a.reason);
    o.iv(a.retry_after_ms);
    o.f64(a.jitter);
    o.u8(static_cast<std::uint8_t>((a.trip ? 1 : 0) | (a.trial ? 2 : 0) | (a.ws ? 4 : 0)));
  }
  o.uv(pp.samples.size());
  for (const auto& [method, samples] : pp.samples) {
    o.str(method);
    o.uv(samples.size());
    for (const auto& s : samples) {
      o.iv(s.t_ms);
      o.iv(s.latency_us);
      o.u8(static_cast<std::uint8_t>(s.outcome));
    }
  }
  o.u8(static_cast<std::uint8_t>((pp.height ? kHeight : 0) | (pp.probe ? kProbe : 0) |
                                 (pp.quota ? kQuota : 0) | (pp.lag ? kLag : 0) |
                                 (pp.archival ? kArchival : 0) | (pp.cordon ? kCordon : 0) |
                                 (pp.log_limit ? kLogLimit : 0)));
  if (pp.height) {
    o.uv(pp.height->block);
    o.iv(pp.height->t_ms);
  }
  if (pp.probe) {
    o.iv(pp.probe->t_ms);
    o.uv(pp.probe->chain_id);
    o.opt_bool(pp.probe->archival);
    o.opt_bool(pp.probe->batch);
    o.opt_bool(pp.probe->syncing);
    o.str(pp.probe->client_version);
  }
  if (pp.quota) {
    o.iv(pp.quota->t_ms);
    o.f64(pp.quota->taken);
    o.f64(pp.quota->quota.rps);
    o.f64(pp.quota->quota.burst);
  }
  if (pp.lag) {
    o.iv(pp.lag->behind_since_ms);
    o.iv(pp.lag->t_ms);
    o.uv(pp.lag->blocks);
  }
  if (pp.archival) {
    o.opt_bool(pp.archival->archival);
    o.iv(pp.archival->t_ms);
  }
  if (pp.cordon) {
    o.iv(pp.cordon->t_ms);
    o.u8(pp.cordon->on ? 1 : 0);
    o.iv(pp.cordon->until_ms);
    o.str(pp.cordon->reason);
  }
  if (pp.log_limit) {
    o.uv(pp.log_limit->blocks);
    o.iv(pp.log_limit->t_ms);
  }
}

void get_attempts(In& in, const std::string& key, PendingEvents::PerProvider& pp) {
  for (auto n = in.count(); n > 0; --n) {
    AttemptEvent a;
    a.key = key;
    a.t_ms = in.iv();
    a.cls = in.enumerated(OutcomeClass::unknown);
    a.reason = in.str();
    a.retry_after_ms = in.iv();
    a.jitter = in.f64();
    const auto flags = in.u8();
    a.trip = (flags & 1) != 0;
    a.trial = (flags & 2) != 0;
    a.ws = (flags & 4) != 0;  // records written before issue 18's transports: HTTP
    pp.attempts.push_back(std::move(a));
  }
}

void get_samples(In& in, PendingEvents::PerProvider& pp) {
  for (auto n = in.count(); n > 0; --n) {
    auto& samples = pp.samples[in.str()];
    for (auto k = in.count(); k > 0; --k) {
      Sample s;
      s.t_ms = in.iv();
      s.latency_us = in.iv();
      s.outcome = in.enumerated(kLastOutcome);
      samples.push_back(s);
    }
  }
}

void get_marks(In& in, const std::string& key, PendingEvents::PerProvider& pp) {
  const auto has = in.u8();
  if ((has & kHeight) != 0) pp.height = Height{in.uv(), in.iv()};
  if ((has & kProbe) != 0) {
    ProbeFindings p;
    p.t_ms = in.iv();
    p.chain_id = in.uv();
    p.archival = in.opt_bool();
    p.batch = in.opt_bool();
    p.syncing = in.opt_bool();
    p.client_version = in.str();
    pp.probe = std::move(p);
  }
  if ((has & kQuota) != 0) {
    QuotaEvent q;
    q.key = key;
    q.t_ms = in.iv();
    q.taken = in.f64();
    q.quota.rps = in.f64();
    q.quota.burst = in.f64();
    pp.quota = std::move(q);
  }
  if ((has & kLag) != 0) {
    LagMark l;
    l.behind_since_ms = in.iv();
    l.t_ms = in.iv();
    l.blocks = in.uv();
    pp.lag = l;
  }
  if ((has & kArchival) != 0) {
    ArchivalSeen a;
    a.archival = in.opt_bool();
    a.t_ms = in.iv();
    pp.archival = a;
  }
  if ((has & kCordon) != 0) {
    Cordon c;
    c.t_ms = in.iv();
    c.on = in.enumerated(std::uint8_t{1}) == 1;
    c.until_ms = in.iv();
    c.reason = in.str();
    pp.cordon = std::move(c);
  }
  if ((has & kLogLimit) != 0) pp.log_limit = LogLimit{in.uv(), in.iv()};
}

}  // namespace

std::uint32_t crc32c(std::string_view data, std::uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
#if defined(__x86_64__)
  if (have_sse42()) return ~crc_hw(p, data.size(), ~crc);
#endif
  return ~crc_soft(p, data.size(), ~crc);
}

std::string header(std::uint64_t generation) {
  std::string out(kMagic);
  put_u64(out, generation);
  put_u32(out, crc32c(out));
  return out;
}

std::string encode(const PendingEvents& pending) {
  Out o;
  o.uv(pending.providers.size());
  for (const auto& [key, pp] : pending.providers) {
    o.str(key);
    put_provider(o, pp);
  }
  o.uv(pending.high_water.size());
  for (const auto& [key, hw] : pending.high_water) {
    o.str(key);
    o.uv(hw.height.block);
    o.iv(hw.height.t_ms);
    o.u8(hw.reset ? 1 : 0);
  }
  o.uv(pending.cursors.size());
  for (const auto& [key, n] : pending.cursors) {
    o.str(key);
    o.uv(n);
  }
  o.uv(pending.filters.size());
  for (const auto& [key, pin] : pending.filters) {
    o.str(key);
    o.str(pin.provider);
    o.iv(pin.t_ms);
  }
  o.uv(pending.count);
  return o.take();
}

std::optional<PendingEvents> decode(std::string_view payload) {
  In in(payload);
  PendingEvents p;
  for (auto n = in.count(); n > 0; --n) {
    auto key = in.str();
    auto& pp = p.providers[key];
    pp.health = get_health(in);
    get_attempts(in, key, pp);
    get_samples(in, pp);
    get_marks(in, key, pp);
  }
  for (auto n = in.count(); n > 0; --n) {
    HighWaterEvent hw;
    hw.chain_key = in.str();
    hw.height = Height{in.uv(), in.iv()};
    const auto reset = in.u8();
    if (reset > 1) return std::nullopt;
    hw.reset = reset == 1;
    auto key = hw.chain_key;
    p.high_water.insert_or_assign(std::move(key), std::move(hw));
  }
  for (auto n = in.count(); n > 0; --n) {
    auto key = in.str();
    p.cursors[std::move(key)] = in.uv();
  }
  for (auto n = in.count(); n > 0; --n) {
    auto key = in.str();
    FilterPin pin;
    pin.provider = in.str();
    pin.t_ms = in.iv();
    p.filters.insert_or_assign(std::move(key), std::move(pin));
  }
  p.count = in.uv();
  if (!in.ok()) return std::nullopt;
  return p;
}

std::string record(std::uint64_t generation, const PendingEvents& pending) {
  const auto payload = encode(pending);
  std::string length;
  put_u32(length, static_cast<std::uint32_t>(payload.size()));
  std::string out;
  out.reserve(kRecordHeadBytes + payload.size());
  out += length;
  put_u32(out, record_crc(generation, length, payload));
  out += payload;
  return out;
}

Scan scan(std::string_view bytes, bool decode_records) {
  Scan s;
  if (bytes.size() < kHeaderBytes || bytes.substr(0, kMagic.size()) != kMagic ||
      get_le(bytes.data() + 16, 4) != crc32c(bytes.substr(0, 16))) {
    s.torn = !bytes.empty();
    return s;
  }
  s.header_ok = true;
  s.generation = get_le(bytes.data() + 8, 8);
  std::size_t pos = kHeaderBytes;
  s.valid_end = pos;
  while (bytes.size() - pos >= kRecordHeadBytes) {
    const auto length = get_le(bytes.data() + pos, 4);
    if (length == 0 || length > kMaxRecordBytes || bytes.size() - pos - kRecordHeadBytes < length)
      break;
    const auto payload = bytes.substr(pos + kRecordHeadBytes, length);
    if (get_le(bytes.data() + pos + 4, 4) !=
        record_crc(s.generation, bytes.substr(pos, 4), payload))
      break;
    if (decode_records) {
      if (auto p = decode(payload)) {
        s.records.push_back(std::move(*p));
      } else {
        ++s.undecodable;  // a whole record we cannot read (a newer writer?): skipped, not the rest
      }
    }
    pos += kRecordHeadBytes + length;
    s.valid_end = pos;
  }
  s.torn = s.valid_end < bytes.size();
  return s;
}

}  // namespace rpcroute::journal
