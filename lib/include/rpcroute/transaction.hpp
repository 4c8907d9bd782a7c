#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace rpcroute {

/// Ethereum's keccak256 (the original Keccak padding, not SHA3-256's).
[[nodiscard]] std::array<std::uint8_t, 32> keccak256(std::span<const std::uint8_t> bytes);

/// The sender of a signed raw transaction (the hex string eth_sendRawTransaction carries: legacy,
/// EIP-155, or typed 0x01..0x7f, blob transactions with or without their sidecar), recovered from
/// its secp256k1 signature. A lower-case "0x…" address; nullopt when it does not parse.
///
///   transaction_sender("0x02f8…") == "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"
[[nodiscard]] std::optional<std::string> transaction_sender(std::string_view raw_hex);

}  // namespace rpcroute
