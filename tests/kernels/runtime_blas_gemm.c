/* Cheat (g): hands the work to a BLAS resolved by the dynamic linker at load time (numpy's
   OpenBLAS is mapped in the worker). The import is not on the allow-list. */
enum { RowMajor = 101, NoTrans = 111 };
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);

void ks_kernel(float *c, const float *a, const float *b, long m, long n, long k) {
    cblas_sgemm(RowMajor, NoTrans, NoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n,
                0.0f, c, (int)n);
}
