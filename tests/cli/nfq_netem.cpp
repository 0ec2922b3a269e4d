// netem in user space, for kernels without sch_netem: the packets an iptables NFQUEUE rule hands
// over are dropped with probability `loss` and the rest released after `delay` ms, in arrival
// order (a constant delay keeps TCP's order, as netem's does). Run inside the namespace whose
// rule feeds the queue:
//   iptables-legacy -A OUTPUT -o eth0 -j NFQUEUE --queue-num Q
//   nfq_netem Q DELAY_MS LOSS SEED     (until SIGTERM / SIGINT; prints its counts then)
//   kernel --packet--> queue Q --nfq_netem: drop p | hold delay--> verdict ACCEPT
// glibc's netinet/in.h first: it tells linux/in.h (through linux/netfilter.h) not to define
// in_addr again.
#include <arpa/inet.h>

#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <poll.h>
#include <random>
#include <sys/socket.h>

namespace {

using clock_type = std::chrono::steady_clock;

struct held {
  uint32_t id;
  clock_type::time_point due;
};

struct netem {
  std::chrono::milliseconds delay{0};
  std::bernoulli_distribution lose{0};
  std::mt19937_64 rng;
  std::deque<held> queue;
  long long seen = 0, dropped = 0;
};

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int) { g_stop = 1; }

int on_packet(nfq_q_handle* qh, nfgenmsg*, nfq_data* nfa, void* data) {
  auto& n = *static_cast<netem*>(data);
  const nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (!ph) return 0;
  uint32_t id = ntohl(ph->packet_id);
  ++n.seen;
  if (n.lose(n.rng)) {
    ++n.dropped;
    return nfq_set_verdict(qh, id, NF_DROP, 0, nullptr);
  }
  n.queue.push_back({id, clock_type::now() + n.delay});
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: nfq_netem QUEUE DELAY_MS LOSS SEED\n");
    return 2;
  }
  auto queue_num = static_cast<uint16_t>(std::atoi(argv[1]));
  netem n;
  n.delay = std::chrono::milliseconds(std::atoi(argv[2]));
  n.lose = std::bernoulli_distribution(std::atof(argv[3]));
  n.rng.seed(std::strtoull(argv[4], nullptr, 10));

  nfq_handle* h = nfq_open();
  if (!h) {
    std::perror("nfq_open");
    return 1;
  }
  nfq_q_handle* qh = nfq_create_queue(h, queue_num, &on_packet, &n);
  if (!qh) {
    std::fprintf(stderr, "nfq_netem: cannot bind queue %u (is another program on it?)\n",
                 queue_num);
    return 1;
  }
  // Only the packet ids are needed: no payload crosses into user space.
  nfq_set_mode(qh, NFQNL_COPY_META, 0);
  nfq_set_queue_maxlen(qh, 65536);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  int fd = nfq_fd(h);
  int big = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  std::printf("nfq_netem: queue %u, delay %lld ms, loss %s\n", queue_num,
              static_cast<long long>(n.delay.count()), argv[3]);
  std::fflush(stdout);

  alignas(8) char buf[65536];
  while (!g_stop) {
    int wait_ms = 100;
    if (!n.queue.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(n.queue.front().due -
                                                                        clock_type::now());
      wait_ms = static_cast<int>(std::max<long long>(0, left.count()));
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) > 0 && (p.revents & POLLIN)) {
      ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) nfq_handle_packet(h, buf, static_cast<int>(r));
    }
    auto now = clock_type::now();
    while (!n.queue.empty() && n.queue.front().due <= now) {
      nfq_set_verdict(qh, n.queue.front().id, NF_ACCEPT, 0, nullptr);
      n.queue.pop_front();
    }
  }
  for (const auto& p : n.queue) nfq_set_verdict(qh, p.id, NF_ACCEPT, 0, nullptr);
  std::printf("nfq_netem: %lld packets, %lld dropped\n", n.seen, n.dropped);
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
