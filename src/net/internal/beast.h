// Private: the one place src/net includes Boost.Beast/Asio (also the precompiled header of the
// Beast translation units). Never include this from a public header.
#pragma once

// Boost 1.74's Asio coroutine headers use std::exchange without including <utility> (g++ 12).
#include <utility>

// Asio 1.74 only detects co_await on clang through <experimental/coroutine> (libc++); with
// libstdc++ 12 clang-14 works with the standard <coroutine> once told so.
#if defined(__clang__) && !defined(BOOST_ASIO_HAS_CO_AWAIT)
#define BOOST_ASIO_HAS_CO_AWAIT 1
#define BOOST_ASIO_HAS_STD_COROUTINE 1
#endif

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace sovai::net::internal {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
}  // namespace sovai::net::internal
