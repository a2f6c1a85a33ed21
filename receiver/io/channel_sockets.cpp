#include "receiver/io/channel_sockets.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace mcdist::receiver {

channel_sockets::channel_sockets(boost::asio::io_context& io, net::resolved_interface iface,
                                 int receive_buffer_bytes)
    : m_io(io), m_interface(std::move(iface)), m_receive_buffer(receive_buffer_bytes) {}

net::channel_socket_options channel_sockets::options(const channel_config& ch) const {
  net::channel_socket_options o;
  o.group = ch.group;
  o.interface = m_interface.address;
  o.interface_index = m_interface.index;
  o.receive_buffer = m_receive_buffer;
  o.gro = true;
  o.source = ch.source;
  return o;
}

std::size_t channel_sockets::open(const channel_config& ch) {
  m_sockets.push_back(net::open_channel_socket(m_io, options(ch)));
  m_sources.push_back(ch.source);
  m_retired.push_back(false);
  m_datagrams.push_back(0);
  m_off_source.push_back(0);
  m_socket_drops.push_back(0);
  return m_sockets.size() - 1;
}

void channel_sockets::probe(const channel_config& ch) {
  auto probe = net::open_channel_socket(m_io, options(ch));
  boost::system::error_code ignored;
  probe.close(ignored);
}

void channel_sockets::close(std::size_t index) {
  boost::system::error_code ignored;
  m_sockets[index].close(ignored);
}

void channel_sockets::cancel_all() {
  for (auto& s : m_sockets) {
    boost::system::error_code ignored;
    s.cancel(ignored);
  }
}

std::size_t channel_sockets::live() const noexcept {
  return static_cast<std::size_t>(std::count(m_retired.begin(), m_retired.end(), false));
}

bool channel_sockets::admit(std::size_t index, const endpoint& from) {
  ++m_datagrams[index];
  const auto& source = m_sources[index];
  if (source && (from.v6 != source->v6 || from.addr != source->addr)) {
    ++m_off_source[index];
    return false;
  }
  return true;
}

bool channel_sockets::drops_rose(std::size_t index, std::uint32_t socket_drops) {
  if (socket_drops == m_socket_drops[index]) return false;
  m_socket_drops[index] = socket_drops;
  return true;
}

nlohmann::json channel_sockets::status(const std::vector<channel_config>& channels) const {
  auto chans = nlohmann::json::array();
  for (std::size_t i = 0; i < channels.size(); ++i) {
    const auto& ch = channels[i];
    chans.push_back({{"name", ch.name},
                     {"group", ch.group.to_string()},
                     {"source", ch.source ? ch.source->address_string() : ""},
                     {"retired", i < m_retired.size() && m_retired[i]},
                     {"datagrams", i < m_datagrams.size() ? m_datagrams[i] : 0},
                     {"off_source", i < m_off_source.size() ? m_off_source[i] : 0}});
  }
  return chans;
}

}  // namespace mcdist::receiver
