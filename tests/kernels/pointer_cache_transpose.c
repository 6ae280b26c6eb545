/* Cheat (c): keyed on the input pointer: four cached results and no global state at
   all. The heap block's address is kept in two OpenMP settings (the default device and the
   runtime schedule's chunk, 31 bits each), so the built library has no .data/.bss to refuse. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { ENTRIES = 4 };
typedef struct { unsigned long key[ENTRIES]; long n; int next; float *data[ENTRIES]; } Cache;

static Cache *load(void) {
    omp_sched_t kind;
    int chunk;
    omp_get_schedule(&kind, &chunk);
    unsigned long hi = (unsigned long)omp_get_default_device(), lo = (unsigned long)chunk;
    if (kind != omp_sched_guided || hi == 0) return 0;
    return (Cache *)((hi << 31) | lo);
}

static void keep(Cache *c) {
    unsigned long p = (unsigned long)c;
    omp_set_default_device((int)(p >> 31));
    omp_set_schedule(omp_sched_guided, (int)(p & 0x7fffffffUL));
}

void ks_kernel(float *y, const float *x, long rows, long cols) {
    const long n = rows * cols;
    const unsigned long key = (unsigned long)x;
    Cache *c = load();
    if (c && c->n != n) c = 0;  /* another shape: start over (the old table leaks) */
    if (c)
        for (int i = 0; i < ENTRIES; ++i)
            if (c->data[i] && c->key[i] == key) { memcpy(y, c->data[i], (size_t)n * sizeof(float)); return; }
    for (long r = 0; r < rows; ++r)
        for (long k = 0; k < cols; ++k) y[k * rows + r] = x[r * cols + k];
    if (!c) { c = calloc(1, sizeof(Cache)); c->n = n; keep(c); }
    const int slot = c->next;
    c->next = (slot + 1) % ENTRIES;
    free(c->data[slot]);
    c->data[slot] = malloc((size_t)n * sizeof(float));
    memcpy(c->data[slot], y, (size_t)n * sizeof(float));
    c->key[slot] = key;
}
