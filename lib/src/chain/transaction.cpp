#include "rpcroute/transaction.hpp"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/obj_mac.h>

#include <memory>
#include <vector>

namespace rpcroute {

namespace {

std::uint64_t rotl(std::uint64_t x, int n) { return (x << n) | (x >> (64 - n)); }

void keccak_f1600(std::uint64_t st[25]) {
  static constexpr std::uint64_t kRound[24] = {
      0x0000000000000001, 0x0000000000008082, 0x800000000000808a, 0x8000000080008000,
      0x000000000000808b, 0x0000000080000001, 0x8000000080008081, 0x8000000000008009,
      0x000000000000008a, 0x0000000000000088, 0x0000000080008009, 0x000000008000000a,
      0x000000008000808b, 0x800000000000008b, 0x8000000000008089, 0x8000000000008003,
      0x8000000000008002, 0x8000000000000080, 0x000000000000800a, 0x800000008000000a,
      0x8000000080008081, 0x8000000000008080, 0x0000000080000001, 0x8000000080008008};
  static constexpr int kRot[24] = {1,  3,  6,  10, 15, 21, 28, 36, 45, 55, 2,  14,
                                   27, 41, 56, 8,  25, 43, 62, 18, 39, 61, 20, 44};
  static constexpr int kLane[24] = {10, 7,  11, 17, 18, 3, 5,  16, 8,  21, 24, 4,
                                    15, 23, 19, 13, 12, 2, 20, 14, 22, 9,  6,  1};
  for (std::uint64_t rc : kRound) {
    std::uint64_t bc[5];
    for (int i = 0; i < 5; ++i) bc[i] = st[i] ^ st[i + 5] ^ st[i + 10] ^ st[i + 15] ^ st[i + 20];
    for (int i = 0; i < 5; ++i) {
      const std::uint64_t t = bc[(i + 4) % 5] ^ rotl(bc[(i + 1) % 5], 1);
      for (int j = 0; j < 25; j += 5) st[j + i] ^= t;
    }
    std::uint64_t t = st[1];
    for (int i = 0; i < 24; ++i) {
      const int j = kLane[i];
      const std::uint64_t next = st[j];
      st[j] = rotl(t, kRot[i]);
      t = next;
    }
    for (int j = 0; j < 25; j += 5) {
      for (int i = 0; i < 5; ++i) bc[i] = st[j + i];
      for (int i = 0; i < 5; ++i) st[j + i] ^= (~bc[(i + 1) % 5]) & bc[(i + 2) % 5];
    }
    st[0] ^= rc;
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::vector<std::uint8_t>> from_hex(std::string_view s) {
  if (s.starts_with("0x") || s.starts_with("0X")) s.remove_prefix(2);
  if (s.size() % 2 != 0) return std::nullopt;
  std::vector<std::uint8_t> out(s.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return out;
}

using Bytes = std::span<const std::uint8_t>;

/// One RLP item: its whole encoding and its payload (a string's bytes, or a list's items).
struct RlpItem {
  Bytes encoded;
  Bytes payload;
  bool list = false;
};

/// The item at the start of `in`; nullopt when malformed or truncated.
std::optional<RlpItem> rlp_item(Bytes in) {
  if (in.empty()) return std::nullopt;
  const std::uint8_t b = in[0];
  std::size_t header = 1, length = 0;
  bool list = false;
  if (b < 0x80) {
    return RlpItem{in.first(1), in.first(1), false};
  } else if (b <= 0xb7) {
    length = b - 0x80;
  } else if (b <= 0xbf || (b >= 0xf8)) {
    list = b >= 0xf8;
    const std::size_t n = b - (list ? 0xf7 : 0xb7);
    if (n > 4 || in.size() < 1 + n) return std::nullopt;  // no transaction is 4 GB
    for (std::size_t i = 0; i < n; ++i) length = length << 8 | in[1 + i];
    header = 1 + n;
  } else {
    list = true;
    length = b - 0xc0;
  }
  if (in.size() < header + length) return std::nullopt;
  return RlpItem{in.first(header + length), in.subspan(header, length), list};
}

std::optional<std::vector<RlpItem>> rlp_list_items(const RlpItem& list) {
  if (!list.list) return std::nullopt;
  std::vector<RlpItem> items;
  Bytes rest = list.payload;
  while (!rest.empty()) {
    auto item = rlp_item(rest);
    if (!item) return std::nullopt;
    items.push_back(*item);
    rest = rest.subspan(item->encoded.size());
  }
  return items;
}

void append_length(std::vector<std::uint8_t>& out, std::uint8_t short_base, std::uint8_t long_base,
                   std::size_t n) {
  if (n < 56) {
    out.push_back(static_cast<std::uint8_t>(short_base + n));
    return;
  }
  std::uint8_t be[8];
  int k = 0;
  for (std::size_t v = n; v > 0; v >>= 8) be[k++] = static_cast<std::uint8_t>(v & 0xff);
  out.push_back(static_cast<std::uint8_t>(long_base + k));
  while (k > 0) out.push_back(be[--k]);
}

void append_uint(std::vector<std::uint8_t>& out, std::uint64_t v) {
  if (v == 0) {
    out.push_back(0x80);
    return;
  }
  if (v < 0x80) {
    out.push_back(static_cast<std::uint8_t>(v));
    return;
  }
  std::uint8_t be[8];
  int k = 0;
  for (; v > 0; v >>= 8) be[k++] = static_cast<std::uint8_t>(v & 0xff);
  out.push_back(static_cast<std::uint8_t>(0x80 + k));
  while (k > 0) out.push_back(be[--k]);
}

std::optional<std::uint64_t> as_uint(const RlpItem& item) {
  if (item.list || item.payload.size() > 8) return std::nullopt;
  std::uint64_t v = 0;
  for (auto b : item.payload) v = v << 8 | b;
  return v;
}

/// The list of `items` (already encoded) and what precedes it: the signing payload.
std::vector<std::uint8_t> rlp_list(std::span<const Bytes> items,
                                   std::span<const std::uint8_t> prefix) {
  std::size_t n = 0;
  for (const auto& i : items) n += i.size();
  std::vector<std::uint8_t> out(prefix.begin(), prefix.end());
  append_length(out, 0xc0, 0xf7, n);
  for (const auto& i : items) out.insert(out.end(), i.begin(), i.end());
  return out;
}

struct BnDeleter {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
struct CtxDeleter {
  void operator()(BN_CTX* c) const { BN_CTX_free(c); }
};
struct GroupDeleter {
  void operator()(EC_GROUP* g) const { EC_GROUP_free(g); }
};
struct PointDeleter {
  void operator()(EC_POINT* p) const { EC_POINT_free(p); }
};
using Bn = std::unique_ptr<BIGNUM, BnDeleter>;

/// The address whose key signed `hash` with (r, s, recovery id): ecrecover on secp256k1.
std::optional<std::string> recover_address(const std::array<std::uint8_t, 32>& hash, Bytes r_bytes,
                                           Bytes s_bytes, int recid) {
  if (recid < 0 || recid > 1 || r_bytes.empty() || s_bytes.empty() || r_bytes.size() > 32 ||
      s_bytes.size() > 32) {
    return std::nullopt;
  }
  std::unique_ptr<BN_CTX, CtxDeleter> ctx(BN_CTX_new());
  std::unique_ptr<EC_GROUP, GroupDeleter> group(EC_GROUP_new_by_curve_name(NID_secp256k1));
  if (!ctx || !group) return std::nullopt;
  const BIGNUM* n = EC_GROUP_get0_order(group.get());
  Bn r(BN_bin2bn(r_bytes.data(), static_cast<int>(r_bytes.size()), nullptr));
  Bn s(BN_bin2bn(s_bytes.data(), static_cast<int>(s_bytes.size()), nullptr));
  Bn e(BN_bin2bn(hash.data(), static_cast<int>(hash.size()), nullptr));
  Bn rinv(BN_new()), u1(BN_new()), u2(BN_new());
  if (!r || !s || !e || !rinv || !u1 || !u2) return std::nullopt;
  if (BN_is_zero(r.get()) || BN_is_zero(s.get()) || BN_cmp(r.get(), n) >= 0 ||
      BN_cmp(s.get(), n) >= 0) {
    return std::nullopt;
  }
  // R has x = r (x = r + n never happens in practice: its chance is about 2^-128) and the y parity
  // of the recovery id; the key is r⁻¹(sR − eG) = (−e·r⁻¹)G + (s·r⁻¹)R.
  std::unique_ptr<EC_POINT, PointDeleter> big_r(EC_POINT_new(group.get())),
      q(EC_POINT_new(group.get()));
  if (!big_r || !q) return std::nullopt;
  if (EC_POINT_set_compressed_coordinates(group.get(), big_r.get(), r.get(), recid, ctx.get()) != 1)
    return std::nullopt;
  if (BN_mod_inverse(rinv.get(), r.get(), n, ctx.get()) == nullptr) return std::nullopt;
  if (BN_nnmod(e.get(), e.get(), n, ctx.get()) != 1) return std::nullopt;
  if (BN_mod_mul(u1.get(), e.get(), rinv.get(), n, ctx.get()) != 1) return std::nullopt;
  if (!BN_is_zero(u1.get()) && BN_sub(u1.get(), n, u1.get()) != 1) return std::nullopt;
  if (BN_mod_mul(u2.get(), s.get(), rinv.get(), n, ctx.get()) != 1) return std::nullopt;
  if (EC_POINT_mul(group.get(), q.get(), u1.get(), big_r.get(), u2.get(), ctx.get()) != 1)
    return std::nullopt;
  if (EC_POINT_is_at_infinity(group.get(), q.get())) return std::nullopt;
  std::uint8_t point[65];
  if (EC_POINT_point2oct(group.get(), q.get(), POINT_CONVERSION_UNCOMPRESSED, point, sizeof point,
                         ctx.get()) != 65) {
    return std::nullopt;
  }
  const auto digest = keccak256(Bytes(point + 1, 64));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  for (std::size_t i = 12; i < 32; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

}  // namespace

std::array<std::uint8_t, 32> keccak256(std::span<const std::uint8_t> in) {
  constexpr std::size_t kRate = 136;
  std::uint64_t st[25] = {};
  auto absorb = [&](const std::uint8_t* block) {
    for (std::size_t i = 0; i < kRate / 8; ++i) {
      std::uint64_t lane = 0;
      for (int b = 7; b >= 0; --b) lane = lane << 8 | block[i * 8 + b];
      st[i] ^= lane;
    }
    keccak_f1600(st);
  };
  while (in.size() >= kRate) {
    absorb(in.data());
    in = in.subspan(kRate);
  }
  std::uint8_t last[kRate] = {};
  std::copy(in.begin(), in.end(), last);
  last[in.size()] ^= 0x01;
  last[kRate - 1] ^= 0x80;
  absorb(last);
  std::array<std::uint8_t, 32> out;
  for (std::size_t i = 0; i < 32; ++i)
    out[i] = static_cast<std::uint8_t>(st[i / 8] >> (8 * (i % 8)));
  return out;
}

std::optional<std::string> transaction_sender(std::string_view raw_hex) {
  const auto raw = from_hex(raw_hex);
  if (!raw || raw->empty()) return std::nullopt;
  const Bytes bytes(*raw);
  if (bytes[0] >= 0xc0) {
    // Legacy: [nonce, gasPrice, gas, to, value, data, v, r, s]; EIP-155 signs chain id, 0, 0 in
    // place of v, r, s.
    auto top = rlp_item(bytes);
    if (!top || top->encoded.size() != bytes.size()) return std::nullopt;
    auto items = rlp_list_items(*top);
    if (!items || items->size() != 9) return std::nullopt;
    auto v = as_uint((*items)[6]);
    if (!v) return std::nullopt;
    std::vector<Bytes> fields;
    fields.reserve(6);
    for (int i = 0; i < 6; ++i) fields.push_back((*items)[i].encoded);
    std::vector<std::uint8_t> tail;
    int recid = 0;
    if (*v == 27 || *v == 28) {
      recid = static_cast<int>(*v - 27);
    } else if (*v >= 35) {
      recid = static_cast<int>((*v - 35) % 2);
      append_uint(tail, (*v - 35) / 2);
      tail.push_back(0x80);
      tail.push_back(0x80);
      fields.push_back(Bytes(tail));
    } else {
      return std::nullopt;
    }
    const auto payload = rlp_list(fields, {});
    return recover_address(keccak256(payload), (*items)[7].payload, (*items)[8].payload, recid);
  }
  if (bytes[0] > 0x7f || bytes.size() < 2) return std::nullopt;
  // Typed (EIP-2718): type || rlp([fields..., yParity, r, s]); the signature covers type ||
  // rlp([fields...]).
  auto top = rlp_item(bytes.subspan(1));
  if (!top || top->encoded.size() != bytes.size() - 1) return std::nullopt;
  auto items = rlp_list_items(*top);
  if (!items) return std::nullopt;
  if (bytes[0] == 0x03 && !items->empty() && (*items)[0].list) {
    items = rlp_list_items(
        (*items)[0]);  // a blob transaction with its sidecar: [tx, blobs, commitments, proofs]
    if (!items) return std::nullopt;
  }
  const std::size_t n = items->size();
  if (n < 4) return std::nullopt;
  auto parity = as_uint((*items)[n - 3]);
  if (!parity || *parity > 1) return std::nullopt;
  std::vector<Bytes> fields;
  for (std::size_t i = 0; i + 3 < n; ++i) fields.push_back((*items)[i].encoded);
  const std::uint8_t type[1] = {bytes[0]};
  const auto payload = rlp_list(fields, type);
  return recover_address(keccak256(payload), (*items)[n - 2].payload, (*items)[n - 1].payload,
                         static_cast<int>(*parity));
}

}  // namespace rpcroute
