/* recv_drop.so: LD_PRELOAD shim that drops received UDP datagrams with a probability, for giving
 * a program without a test drop option (UFTP's uftpd) the same independent loss at each
 * receiver that mcdistd gets from --drop-rate (tests/bench/scale_real.py).
 *
 *   MCDIST_DROP_RATE=0.01 MCDIST_DROP_SEED=7 LD_PRELOAD=./recv_drop.so uftpd ...
 *
 * recvfrom() and recvmsg() on datagram sockets: a dropped datagram is read and discarded and the
 * call reads the next one without blocking; with none queued it fails with EAGAIN, as a
 * non-blocking read of an empty socket does (a select() loop then waits again). Other sockets
 * and other calls are untouched. The generator is SplitMix64, seeded per process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>

static double drop_rate = -1;
static uint64_t rng_state;

static void init(void) {
  if (drop_rate >= 0) return;
  const char* r = getenv("MCDIST_DROP_RATE");
  const char* s = getenv("MCDIST_DROP_SEED");
  drop_rate = r ? atof(r) : 0;
  rng_state = s ? strtoull(s, NULL, 10) : 1;
}

static int drop_now(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  if (drop_rate <= 0 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_DGRAM)
    return 0;
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53 < drop_rate;
}

ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* addr, socklen_t* alen) {
  static ssize_t (*real)(int, void*, size_t, int, struct sockaddr*, socklen_t*);
  if (!real) real = dlsym(RTLD_NEXT, "recvfrom");
  init();
  socklen_t keep = alen ? *alen : 0;
  ssize_t got = real(fd, buf, n, flags, addr, alen);
  while (got >= 0 && drop_now(fd)) {
    if (alen) *alen = keep;
    got = real(fd, buf, n, flags | MSG_DONTWAIT, addr, alen);
  }
  return got;
}

ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  static ssize_t (*real)(int, struct msghdr*, int);
  if (!real) real = dlsym(RTLD_NEXT, "recvmsg");
  init();
  socklen_t keep_name = msg->msg_namelen;
  size_t keep_control = msg->msg_controllen;
  ssize_t got = real(fd, msg, flags);
  while (got >= 0 && drop_now(fd)) {
    msg->msg_namelen = keep_name;
    msg->msg_controllen = keep_control;
    got = real(fd, msg, flags | MSG_DONTWAIT);
  }
  return got;
}
