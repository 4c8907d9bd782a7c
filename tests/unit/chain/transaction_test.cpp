#include <catch2/catch.hpp>

#include <string>

#include "rpcroute/transaction.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_transaction_test {

using namespace rpcroute;

namespace {

std::string hex(const std::array<std::uint8_t, 32>& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (auto b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

std::array<std::uint8_t, 32> keccak_of(std::string_view text) {
  return keccak256(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

// anvil's second dev account, which signed the transactions below (made with `cast mktx`).
constexpr const char* kSender = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

}  // namespace

TEST_CASE("keccak256: Ethereum's padding, across the 136-byte rate", "[transaction]") {
  CHECK(hex(keccak_of("")) == "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
  CHECK(hex(keccak_of("abc")) == "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45");
  // The selector of transfer(address,uint256) is the hash's first four bytes.
  CHECK(hex(keccak_of("transfer(address,uint256)")).substr(0, 8) == "a9059cbb");
  // Exactly one rate (the padding takes a block of its own), and more than one (from `cast keccak`).
  CHECK(hex(keccak_of(std::string(136, 'a'))) == "a6c4d403279fe3e0af03729caada8374b5ca54d8065329a3ebcaeb4b60aa386e");
  CHECK(hex(keccak_of(std::string(200, 'a'))) == "96ea54061def936c4be90b518992fdc6f12f535068a256229aca54267b4d084d");
}

TEST_CASE("transaction_sender: legacy EIP-155, EIP-1559 and contract creation", "[transaction]") {
  // legacy, chain 31337, nonce 7
  CHECK(transaction_sender("0xf86507843b9aca0082520894000000000000000000000000000000000000dead018082f4f6a06c5d6d598ce0e9e6"
                           "a2930d66fc67159c00afed22047d14b8ad9615031ff8b838a0691f8c48b6236722aa501b60ebc23b50494817cccc5654"
                           "2625f37605bc6a4239") == kSender);
  // type 2, chain 1, nonce 300, a token transfer
  CHECK(transaction_sender(
            "0x02f8b30182012c843b9aca008506fc23ac00830186a094000000000000000000000000000000000000dead80b844a9059cbb0000"
            "00000000000000000000000000000000000000000000000000000000beef000000000000000000000000000000000000000000000000"
            "0000000000000005c080a0925b6c7d1c5cdd1ba7f761b908a41fd1d47aed1c7a4e778437985934e1e163b1a02d16ea2a0ff86fa7181f"
            "e98c870216fc36905d949125e05c5127e914bf3a958c") == kSender);
  // type 2, a contract creation (empty `to`)
  CHECK(transaction_sender("0x02f864827a6980018477359400830186a080808f6560006000a0006000526006601af3c080a0ac065ac6dcca70"
                           "0c66ede32dc0252f126bfeaf2a410aa88b3c2cf15f87fce1baa038e3598aa83b862dcc938827dbd2c175757a27a2e8ce"
                           "49072ab80ca5abb3c09f") == kSender);
  // legacy, nonce 0, upper-case hex
  CHECK(transaction_sender("0XF861800182520894000000000000000000000000000000000000DEAD808082F4F6A0038FB2938ED2787A9B0E5B3DD"
                           "0A70236AA6DE8DC7D130A7D0261A563B5CD3419A05CCB74758FA14F8F4E9D99836E9B9C9D4B13CE32C8642C8E5FE0AB4"
                           "4DAD4162A") == kSender);
}

TEST_CASE("transaction_sender: garbage, truncation and a bad signature give nothing", "[transaction]") {
  const std::string good =
      "0xf86507843b9aca0082520894000000000000000000000000000000000000dead018082f4f6a06c5d6d598ce0e9e6a2930d66fc67159c00"
      "afed22047d14b8ad9615031ff8b838a0691f8c48b6236722aa501b60ebc23b50494817cccc56542625f37605bc6a4239";
  CHECK_FALSE(transaction_sender(""));
  CHECK_FALSE(transaction_sender("0x"));
  CHECK_FALSE(transaction_sender("0xzz"));
  CHECK_FALSE(transaction_sender("0x123"));
  CHECK_FALSE(transaction_sender(good.substr(0, good.size() - 2)));  // truncated
  CHECK_FALSE(transaction_sender(good + "00"));                      // trailing bytes
  CHECK_FALSE(transaction_sender("0x80"));
  CHECK_FALSE(transaction_sender("0x02c0"));
  CHECK_FALSE(transaction_sender("0xff"));
  for (std::size_t cut = 2; cut < good.size(); cut += 7) {
    (void)transaction_sender(good.substr(0, cut));  // never crashes on a prefix
  }
  // A changed value: still a signature, of another message — another (unknown) sender.
  std::string other = good;
  other[60] = other[60] == '1' ? '2' : '1';
  auto s = transaction_sender(other);
  CHECK((!s || *s != kSender));
}

}  // namespace unit_transaction_test
