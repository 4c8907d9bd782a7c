#pragma once
// Boost 1.74 detects coroutine support only for g++ with -fcoroutines; clang 14 with libstdc++
// needs the macros set by hand. Include this before any Asio or Beast header.
#include <coroutine>
#include <utility>

#if defined(__clang__) && !defined(BOOST_ASIO_HAS_CO_AWAIT)
#define BOOST_ASIO_HAS_CO_AWAIT 1
#endif
#if defined(__clang__) && !defined(BOOST_ASIO_HAS_STD_COROUTINE)
#define BOOST_ASIO_HAS_STD_COROUTINE 1
#endif

#include <boost/asio.hpp>

namespace rpcroute {
namespace asio = boost::asio;
}
