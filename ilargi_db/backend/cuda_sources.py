"""The CUDA C of the fused GPU kernels (:mod:`ilargi_db.backend.cuda_kernels`), one source per kernel, in one place.

Every kernel keeps to a shape that a serial emulation runs exactly as written: one thread per output
element or input row (a 1-D grid over ``total`` work items), reductions through ``atomicAdd`` into global
memory, no ``__shared__`` memory, no ``__syncthreads``, no warp intrinsics. The tests compile these very
strings with a host C++ compiler behind a small prelude (``tests/device_double/emulator.py``) and run them on the
device double's arrays; what that shows and does not show is in that module's docstring.

Positions (a block's index, a scatter or gather) are ``idx_t`` and a tree's bin codes ``bin_t``: :func:`source`
prepends their typedefs, so each kernel compiles once per position type (int32, int64) it meets. Sizes are
``long long``, the count of work items (``total``) last; doubles throughout. Row-major (C order) everywhere
but ``index`` and the dense block the gram pass and k-means' update read, which are Fortran order (as the
matrix keeps them): column ``k`` of an n-row index starts at ``k * n``. A pointer an
optional operand leaves unused comes with a ``has_*`` flag that is 0.
"""

from __future__ import annotations

from ilargi_db.backend.histogram import LAYOUT

# The thread's work item: a 1-D grid of 1-D blocks.
_ITEM = "const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (item >= total) return;"

_SOURCES = {
    # out[i, c] += sum_k tables[k, index[i, k], c]  (the gather of T @ W; the dense part is a BLAS product)
    "gather_add": """
extern "C" __global__ void gather_add(const idx_t* __restrict__ index, const double* __restrict__ tables,
                                      double* __restrict__ out, long long n, long long t,
                                      long long r, long long m, long long total) {
    ITEM
    const long long i = item / m, c = item % m;
    double s = 0.0;
    for (long long k = 0; k < t; ++k) s += tables[(k * r + (long long)index[k * n + i]) * m + c];
    out[item] += s;
}
""",
    # sums[k, index[i, k], j] += v[i, j]  (T^T V's segment sums: one thread per element of V)
    "segment_add": """
extern "C" __global__ void segment_add(const idx_t* __restrict__ index, const double* __restrict__ v,
                                       double* __restrict__ sums, long long n, long long t,
                                       long long r, long long m, long long total) {
    ITEM
    const long long i = item / m, j = item % m;
    const double value = v[item];
    for (long long k = 0; k < t; ++k) atomicAdd(&sums[(k * r + (long long)index[k * n + i]) * m + j], value);
}
""",
    # sums[k, index[i, k], j] += d_i [dense, 1][i, j]  (the gram pass's per-block weighted sums and counts)
    "gram_add": """
extern "C" __global__ void gram_add(const idx_t* __restrict__ index, const double* __restrict__ dense,
                                    const double* __restrict__ weights, int has_weights,
                                    double* __restrict__ sums, long long n, long long t,
                                    long long r, long long a, long long total) {
    ITEM
    const long long j = item / n, i = item % n;  // rows fastest: neighbouring threads read neighbouring cells
    double value = j < a ? dense[j * n + i] : 1.0;
    if (has_weights) value *= weights[i];
    for (long long k = 0; k < t; ++k)
        atomicAdd(&sums[(k * r + (long long)index[k * n + i]) * (a + 1) + j], value);
}
""",
    # out[scatter[i], j] += weights[i] * table[gather[i], j]  (I_a^T D I_b S_b: the pair grams' accumulator)
    "scatter_add": """
extern "C" __global__ void scatter_add(const idx_t* __restrict__ scatter, const idx_t* __restrict__ gather,
                                       int has_gather, const double* __restrict__ table,
                                       const double* __restrict__ weights, int has_weights,
                                       double* __restrict__ out, long long m, long long total) {
    ITEM
    const long long i = item / m, j = item % m;
    const long long source = has_gather ? (long long)gather[i] : i;
    double value = table[source * m + j];
    if (has_weights) value *= weights[i];
    atomicAdd(&out[(long long)scatter[i] * m + j], value);
}
""",
    # out[p, q] += weights[i] a[scatter[i], p] b[gather[i], q] over the nonzeros of two CSR blocks' rows (two
    # one-hot blocks' S_a^T I_a^T D I_b S_b straight into the c_a x c_b accumulator: one thread per row i)
    "sparse_pair_add": """
extern "C" __global__ void sparse_pair_add(const idx_t* __restrict__ scatter, const idx_t* __restrict__ gather,
                                           const int* __restrict__ a_ptr, const int* __restrict__ a_cols,
                                           const double* __restrict__ a_vals, const int* __restrict__ b_ptr,
                                           const int* __restrict__ b_cols, const double* __restrict__ b_vals,
                                           const double* __restrict__ weights, int has_weights,
                                           double* __restrict__ out, long long c_b, long long total) {
    ITEM
    const long long ra = (long long)scatter[item], rb = (long long)gather[item];
    const double d = has_weights ? weights[item] : 1.0;
    for (int p = a_ptr[ra]; p < a_ptr[ra + 1]; ++p) {
        const double left = d * a_vals[p];
        for (int q = b_ptr[rb]; q < b_ptr[rb + 1]; ++q)
            atomicAdd(&out[(long long)a_cols[p] * c_b + b_cols[q]], left * b_vals[q]);
    }
}
""",
    # labels[i], best[i] = argmin_j, min_j of base[i, j] + offsets[j] + sum_k tables[k, index[i, k], j]
    "nearest_rows": """
extern "C" __global__ void nearest_rows(const idx_t* __restrict__ index, const double* __restrict__ tables,
                                        const double* __restrict__ base, const double* __restrict__ offsets,
                                        long long* __restrict__ labels, double* __restrict__ best,
                                        long long t, long long r, long long m, long long total) {
    ITEM
    const long long i = item;
    long long label = 0;
    double low = 0.0;
    for (long long j = 0; j < m; ++j) {
        double s = base[i * m + j] + offsets[j];
        for (long long k = 0; k < t; ++k) s += tables[(k * r + (long long)index[k * total + i]) * m + j];
        if (j == 0 || s < low || (s != s && low == low)) { low = s; label = j; }  // NaN wins, as argmin's
    }
    labels[i] = label;
    best[i] = low;
}
""",
    # head[labels[i], q] += dense[i, q] (q < a); counts[c, index[i, c], labels[i]] += 1 (q = a + c)
    "label_add": """
extern "C" __global__ void label_add(const idx_t* __restrict__ index, const long long* __restrict__ labels,
                                     const double* __restrict__ dense, double* __restrict__ head,
                                     double* __restrict__ counts, long long n, long long a,
                                     long long t, long long r, long long k, long long total) {
    ITEM
    const long long q = item / n, i = item % n;  // rows fastest: neighbouring threads read neighbouring cells
    const long long label = labels[i];
    if (q < a) {
        atomicAdd(&head[label * a + q], dense[q * n + i]);
    } else {
        const long long c = q - a;
        atomicAdd(&counts[(c * r + (long long)index[c * n + i]) * k + label], 1.0);
    }
}
""",
    # residual = sigmoid(z) - y; loss += log(1 + e^z) - y z  (written without overflow)
    "logistic_rows": """
extern "C" __global__ void logistic_rows(const double* __restrict__ z, const double* __restrict__ y,
                                         double* __restrict__ residual, double* __restrict__ loss,
                                         long long total) {
    ITEM
    const double zi = z[item], yi = y[item];
    atomicAdd(loss, (zi > 0.0 ? zi : 0.0) + log1p(exp(-fabs(zi))) - yi * zi);
    residual[item] = 0.5 * (1.0 + tanh(0.5 * zi)) - yi;
}
""",
    # out = W * numerator / denominator, a zero denominator counting as epsilon  (NMF's update)
    "multiplicative_rows": """
extern "C" __global__ void multiplicative_rows(const double* __restrict__ w, const double* __restrict__ numerator,
                                               const double* __restrict__ denominator, double epsilon,
                                               double* __restrict__ out, long long total) {
    ITEM
    const double d = denominator[item];
    out[item] = w[item] * numerator[item] / (d == 0.0 ? epsilon : d);
}
""",
    # hist[columns[c], bin, :] += (g, h, 1) of row rows[p], bin its code in laid-out column c (one thread per
    # (p, c)): a tree node's histogram over the blocks of a FlatBins (ilargi_db.linalg.binned_matrix)
    "node_histogram": """
extern "C" __global__ void node_histogram(const long long* __restrict__ rows, const double* __restrict__ g,
                                          const double* __restrict__ h, int unit_hessian,
                                          const bin_t* __restrict__ codes, const long long* __restrict__ code_start,
                                          const long long* __restrict__ widths,
                                          const long long* __restrict__ first_column,
                                          const long long* __restrict__ columns, const bin_t* __restrict__ fills,
                                          const idx_t* __restrict__ index, const bool* __restrict__ identity,
                                          double* __restrict__ hist, long long index_rows, long long blocks,
                                          long long n_columns, long long n_bins, long long total) {
    ITEM
    const long long p = item / n_columns, c = item % n_columns, row = rows[p];
    long long b = 0;
    while (b + 1 < blocks && first_column[b + 1] <= c) ++b;  // the column's block (a few blocks: a short scan)
    const long long j = c - first_column[b], w = widths[b];
    long long bin;
    if (identity[b]) {
        bin = codes[code_start[b] + row * w + j];
    } else {
        const long long source = (long long)index[b * index_rows + row];
        bin = source < 0 ? (long long)fills[c] : (long long)codes[code_start[b] + source * w + j];
    }
    const long long at = (columns[c] * n_bins + bin) * HIST_FIELDS;
    atomicAdd(&hist[at + GRADIENT], g[row]);
    atomicAdd(&hist[at + HESSIAN], unit_hessian ? 1.0 : h[row]);
    atomicAdd(&hist[at + COUNT], 1.0);
}
""",
}

_C_TYPES = {"int32": "int", "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short"}


def source(name: str, positions: str = "int64", bins: str = "uint8") -> str:
    """Kernel ``name``'s CUDA C, its positions (``idx_t``) of dtype ``positions`` ("int32" or "int64") and its
    bin codes (``bin_t``, the tree kernels') of dtype ``bins`` ("uint8" or "uint16")."""
    body = _SOURCES[name].replace("ITEM", _ITEM)
    layout = "".join(f"#define {k} {v}\n" for k, v in LAYOUT.items())  # backend/histogram.py's, declared once
    return f"typedef {_C_TYPES[positions]} idx_t;\ntypedef {_C_TYPES[bins]} bin_t;\n{layout}{body}"


KERNEL_NAMES = tuple(_SOURCES)

__all__ = ["KERNEL_NAMES", "source"]
