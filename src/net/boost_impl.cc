// The compiled part of Boost.Asio (with its SSL support) and Boost.Beast, once for the program.
// The top-level CMakeLists.txt defines BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION for every target, so the files that include Asio or Beast
// (src/net, src/proxy, the load generator) declare these functions instead of compiling them
// again in each unity batch; tessera_boost_impl, which tessera_net links publicly, defines them.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
