#pragma once
// The state journal's bytes (`state.json.journal`, beside the snapshot): a header naming the
// journal's generation, then records, each one process's PendingEvents. Internal to lib/src/state/.
//
//   header:  "RPCRJNL1" | generation (u64 LE) | CRC-32C of the 16 bytes before (u32 LE)
//   record:  length (u32 LE) | CRC-32C of generation, length and payload (u32 LE) | payload
//
// A record counts only under the header it was written after (its checksum covers the
// generation), and only while the snapshot names that generation: a compaction gives the snapshot a
// new one, so a journal it folded in is stale from the moment of the snapshot's rename, whether or
// not the journal was removed after it. Reading stops at the first record that is cut short or
// fails its checksum (a writer killed mid-write, a power loss): that record and whatever follows
// are ignored, never an error.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/state.hpp"

namespace rpcroute::journal {

inline constexpr std::string_view kMagic = "RPCRJNL1";
inline constexpr std::size_t kHeaderBytes = 20;
inline constexpr std::size_t kRecordHeadBytes = 8;
/// Longer is not a record of ours (appends past kJournalCompactBytes become compactions).
inline constexpr std::uint32_t kMaxRecordBytes = 64U << 20;

/// CRC-32C (Castagnoli), continuing from `crc` (0 to start). SSE 4.2 when the CPU has it.
[[nodiscard]] std::uint32_t crc32c(std::string_view data, std::uint32_t crc = 0);

[[nodiscard]] std::string header(std::uint64_t generation);
/// One framed record of `pending` for a journal of `generation`.
[[nodiscard]] std::string record(std::uint64_t generation, const PendingEvents& pending);

/// A record's payload and back. decode() refuses (nullopt) anything encode() would not write.
[[nodiscard]] std::string encode(const PendingEvents& pending);
[[nodiscard]] std::optional<PendingEvents> decode(std::string_view payload);

struct Scan {
  bool header_ok = false;  // a whole header with a good checksum
  std::uint64_t generation = 0;
  std::size_t valid_end = 0;    // where the last whole record ends (0 without a header)
  bool torn = false;            // bytes after valid_end (a cut or corrupt record and what follows)
  std::size_t undecodable = 0;  // records whose checksum held but whose payload did not decode
  std::vector<PendingEvents> records;  // in order (only with `decode`)
};
/// Reads a whole journal. Without `decode` only the framing and checksums are checked (an
/// appender finding where the good records end).
[[nodiscard]] Scan scan(std::string_view bytes, bool decode);

}  // namespace rpcroute::journal
