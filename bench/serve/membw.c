// Memory read bandwidth as a decode step sees it: every core streams its share of a buffer far
// larger than the caches, summing it (the sum keeps the reads from being optimised away).
// Prints the median GB/s (1e9 bytes) of ROUNDS passes over SIZE_MB.
// Build: cc -O3 -march=native -fopenmp membw.c -o membw; run: membw [SIZE_MB] [ROUNDS].
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const size_t size_mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
  const int rounds = argc > 2 ? atoi(argv[2]) : 7;
  if (size_mb < 64 || rounds < 1 || rounds > 1000) {
    fprintf(stderr, "membw: SIZE_MB >= 64, 1 <= ROUNDS <= 1000\n");
    return 2;
  }
  const size_t n = size_mb * (1u << 20) / sizeof(uint64_t);
  uint64_t* a = aligned_alloc(64, n * sizeof(uint64_t));
  if (a == NULL) {
    fprintf(stderr, "membw: cannot allocate %zu MiB\n", size_mb);
    return 1;
  }
  // First touch from the threads that read, so that pages sit where they are read.
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = i;
  double gbps[1000];
  uint64_t sink = 0;
  for (int r = 0; r < rounds; ++r) {
    uint64_t total = 0;
    const double start = now_s();
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; ++i) total += a[i];
    const double elapsed = now_s() - start;
    sink += total;
    gbps[r] = n * sizeof(uint64_t) / elapsed / 1e9;
  }
  qsort(gbps, rounds, sizeof(double), compare_doubles);
  printf("%.3f\n", gbps[rounds / 2]);
  fprintf(stderr, "membw: %zu MiB, %d threads, %d rounds, checksum %llu\n", size_mb,
          omp_get_max_threads(), rounds, (unsigned long long)(sink & 0xff));
  free(a);
  return 0;
}
