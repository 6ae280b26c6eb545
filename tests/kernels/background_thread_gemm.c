/* Timing cheat (b), issue 28: GOMP_parallel_start without GOMP_parallel_end leaves a team
 * thread running after the call returns. It watches the inputs; when the harness writes the
 * next call's (before it flushes caches), it computes their product into its own buffer, so
 * the timed call finds the work done and only copies it. State lives in the heap, its address
 * in two OpenMP settings (no .data or .bss to refuse). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

extern void GOMP_parallel_start(void (*fn)(void *), void *data, unsigned num_threads);

typedef struct {
    const float *volatile A, *volatile B;  /* the latest call's inputs (the arena's) */
    volatile long M, N, K;
    float *volatile ready;                 /* C for the inputs whose checksum is ready_sum */
    volatile unsigned long ready_sum;
} State;

static unsigned long checksum(const float *A, const float *B, long M, long N, long K) {
    const unsigned *a = (const unsigned *)A, *b = (const unsigned *)B;
    unsigned long s = 1469598103934665603UL ^ (unsigned long)(M * 131 + N * 7 + K);
    for (long i = 0; i < M * K; ++i) s = (s ^ a[i]) * 1099511628211UL;
    for (long i = 0; i < K * N; ++i) s = (s ^ b[i]) * 1099511628211UL;
    return s;
}

static void product(float *C, const float *A, const float *B, long M, long N, long K) {
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {
            float s = 0.0f;
            for (long k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}

static void background(void *p) {
    State *st = p;
    if (omp_get_thread_num() == 0) return;
    for (;;) {
        const long M = st->M;
        __sync_synchronize();
        const float *A = st->A, *B = st->B;
        const long N = st->N, K = st->K;
        __sync_synchronize();
        if (M == 0 || st->M != M) continue;  /* being retargeted */
        const unsigned long sum = checksum(A, B, M, N, K);
        if (sum == st->ready_sum) continue;
        float *out = malloc((size_t)(M * N) * sizeof(float));
        product(out, A, B, M, N, K);
        if (checksum(A, B, M, N, K) != sum) { free(out); continue; }  /* changed meanwhile */
        st->ready = out;  /* the previous one leaks: the master may be copying it */
        __sync_synchronize();
        st->ready_sum = sum;
    }
}

static State *load(void) {
    omp_sched_t kind;
    int chunk;
    omp_get_schedule(&kind, &chunk);
    unsigned long hi = (unsigned long)omp_get_default_device(), lo = (unsigned long)chunk;
    if (kind != omp_sched_guided || hi == 0) return 0;
    return (State *)((hi << 31) | lo);
}

static void keep(State *st) {
    unsigned long p = (unsigned long)st;
    omp_set_default_device((int)(p >> 31));
    omp_set_schedule(omp_sched_guided, (int)(p & 0x7fffffffUL));
}

void ks_kernel(float *C, const float *A, const float *B, long M, long N, long K) {
    State *st = load();
    if (st) {
        const unsigned long want = checksum(A, B, M, N, K);
        if (st->ready_sum == want) {  /* computed while the harness flushed caches */
            memcpy(C, st->ready, (size_t)(M * N) * sizeof(float));
            return;
        }
        st->M = 0;  /* watch these from now on */
        __sync_synchronize();
        st->A = A, st->B = B, st->N = N, st->K = K;
        __sync_synchronize();
        st->M = M;
        product(C, A, B, M, N, K);
        return;
    }
    product(C, A, B, M, N, K);
    st = calloc(1, sizeof(State));
    st->A = A, st->B = B, st->M = M, st->N = N, st->K = K;
    keep(st);
    GOMP_parallel_start(background, st, 2);  /* and no GOMP_parallel_end: it runs on */
}
