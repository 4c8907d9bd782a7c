#include <catch2/catch.hpp>

#include <string>

#include "rpcroute/methods.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_methods_test {

using namespace rpcroute;

TEST_CASE("methods: every row of the catalogue is found under its own name", "[methods]") {
  for (const auto& row : method_catalogue()) {
    INFO(row.name);
    CHECK(&method_info(row.name) == &row);
  }
}

TEST_CASE("methods: a method outside the catalogue gets the default row", "[methods]") {
  const auto& m = method_info("eth_somethingNew");
  CHECK(m.block_param == -1);
  CHECK_FALSE(m.replay_unsafe);
  CHECK(m.filter == FilterRole::none);
  CHECK(m.sticky == StickySource::none);
  CHECK(m.timeout == TimeoutClass::standard);
  CHECK(method_info("").timeout == TimeoutClass::standard);
  CHECK(method_info("zzz_last").block_param == -1);
  CHECK(method_info("aaa_first").block_param == -1);
  // A prefix of a known name is not that name.
  CHECK(method_info("eth_call_").block_param == -1);
  CHECK(method_info("eth_cal").block_param == -1);
}

TEST_CASE("methods: debug_* and trace_* get the trace timeout, known or not", "[methods]") {
  for (const auto& row : method_catalogue()) {
    if (row.name.starts_with("debug_") || row.name.starts_with("trace_")) {
      INFO(row.name);
      CHECK(row.timeout == TimeoutClass::trace);
    }
  }
  CHECK(method_info("debug_traceTransaction").timeout == TimeoutClass::trace);
  CHECK(method_info("trace_filter").timeout == TimeoutClass::trace);
  CHECK(timeout_class_ms(method_info("debug_traceCall").timeout) == 60'000);
}

TEST_CASE("methods: timeout classes in ms", "[methods]") {
  CHECK(timeout_class_ms(TimeoutClass::cheap) == 5'000);
  CHECK(timeout_class_ms(TimeoutClass::standard) == 10'000);
  CHECK(timeout_class_ms(TimeoutClass::heavy) == 20'000);
  CHECK(timeout_class_ms(TimeoutClass::trace) == 60'000);
  CHECK(method_info("eth_blockNumber").timeout == TimeoutClass::cheap);
  CHECK(method_info("eth_getLogs").timeout == TimeoutClass::heavy);
  CHECK(method_info("eth_sendRawTransaction").timeout == TimeoutClass::standard);
}

TEST_CASE("methods: transaction sends are the replay-unsafe methods", "[methods]") {
  for (const auto& row : method_catalogue()) {
    INFO(row.name);
    CHECK(row.replay_unsafe == (row.name == "eth_sendRawTransaction" || row.name == "eth_sendTransaction"));
  }
}

TEST_CASE("methods: filters are created by eth_new*Filter and read by the filter calls", "[methods]") {
  CHECK(method_info("eth_newFilter").filter == FilterRole::creates);
  CHECK(method_info("eth_newBlockFilter").filter == FilterRole::creates);
  CHECK(method_info("eth_newPendingTransactionFilter").filter == FilterRole::creates);
  CHECK(method_info("eth_getFilterChanges").filter == FilterRole::reads);
  CHECK(method_info("eth_getFilterLogs").filter == FilterRole::reads);
  CHECK(method_info("eth_uninstallFilter").filter == FilterRole::reads);
  CHECK(method_info("eth_getLogs").filter == FilterRole::none);
}

TEST_CASE("methods: block parameter positions", "[methods]") {
  CHECK(method_info("eth_getBlockByNumber").block_param == 0);
  CHECK(method_info("eth_getBalance").block_param == 1);
  CHECK(method_info("eth_getStorageAt").block_param == 2);
  CHECK(method_info("trace_call").block_param == 2);
  CHECK(method_info("eth_blockNumber").block_param == -1);
  CHECK(method_info("eth_getBlockByHash").block_param == -1);
  const auto& logs = method_info("eth_getLogs");
  CHECK(logs.log_filter);
  CHECK(logs.block_param == 0);
  // Optional blocks only where the node assumes latest.
  for (const auto& row : method_catalogue()) {
    INFO(row.name);
    if (row.block_optional) CHECK(row.block_param >= 0);
  }
  CHECK(method_info("eth_call").block_optional);
  CHECK_FALSE(method_info("eth_getBalance").block_optional);
}

TEST_CASE("methods: sticky sources follow a sender's flow", "[methods]") {
  CHECK(method_info("eth_getTransactionCount").sticky == StickySource::address_param);
  CHECK(method_info("eth_call").sticky == StickySource::from_field);
  CHECK(method_info("eth_sendTransaction").sticky == StickySource::from_field);
  CHECK(method_info("eth_sendRawTransaction").sticky == StickySource::raw_transaction);
  CHECK(method_info("eth_getTransactionReceipt").sticky == StickySource::hash_param);
  CHECK(method_info("eth_getBalance").sticky == StickySource::none);
}

}  // namespace unit_methods_test
