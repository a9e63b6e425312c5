// A ceiling for qac's int8 product, not part of the build: oneDNN's matmul
// with u8 activations (a runtime zero point), s8 weights reordered once into
// oneDNN's own blocked layout, per-output-channel scales and f32 output, on
// the encoder's shapes (BERT-base and MiniLM at a batch of 64 x 128 tokens),
// as GOP/s by the wall clock and per core by process CPU time (repeated for
// at least 0.2 s a round, like cpu_peak's products).
//
// Debian's libdnnl-dev (2.6) needs no install to try it: unpack the
// packages where you like and point the compiler there, e.g.
//   apt-get download libdnnl-dev libdnnl2 ocl-icd-libopencl1
//   for d in *.deb; do dpkg -x $d dnnl; done
//   L=dnnl/usr/lib/x86_64-linux-gnu
//   g++ -O2 -I dnnl/usr/include bench/cpu_peak/onednn_s8.cpp -L $L -ldnnl -Wl,-rpath-link,$L -o onednn_s8
//   LD_LIBRARY_PATH=$L OMP_NUM_THREADS=1 ./onednn_s8
// (OMP_NUM_THREADS sets its threads; compare with qac_bench_cpu_peak's
// per-core int8 lines).
#include <dnnl.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>

using namespace dnnl;

static double cpu_now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main() {
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    struct {
        const char *name;
        int M, K, N;
    } shapes[] = {{"bert qkv b64", 8192, 768, 2304},     {"bert attn-out b64", 8192, 768, 768},
                  {"bert ffn-up b64", 8192, 768, 3072},  {"bert ffn-down b64", 8192, 3072, 768},
                  {"minilm ffn-up b64", 8192, 384, 1536}, {"minilm ffn-down b64", 8192, 1536, 384}};
    for (auto &x : shapes) {
        memory::desc a_md({x.M, x.K}, memory::data_type::u8, memory::format_tag::ab);
        memory::desc b_any({x.K, x.N}, memory::data_type::s8, memory::format_tag::any);
        memory::desc b_md({x.K, x.N}, memory::data_type::s8, memory::format_tag::ab);
        memory::desc c_md({x.M, x.N}, memory::data_type::f32, memory::format_tag::ab);
        primitive_attr attr;
        attr.set_output_scales(2, {DNNL_RUNTIME_F32_VAL});
        attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
        matmul::primitive_desc pd(matmul::desc(a_md, b_any, c_md), attr, eng);
        memory A(a_md, eng), B0(b_md, eng), B(pd.weights_desc(), eng), C(c_md, eng);
        memory sc({{x.N}, memory::data_type::f32, memory::format_tag::a}, eng);
        memory zp({{1}, memory::data_type::s32, memory::format_tag::a}, eng);
        auto *a = static_cast<unsigned char *>(A.get_data_handle());
        for (long i = 0; i < (long)x.M * x.K; i++) a[i] = (unsigned char)(i * 7);
        auto *b = static_cast<signed char *>(B0.get_data_handle());
        for (long i = 0; i < (long)x.K * x.N; i++) b[i] = (signed char)((i * 13) % 255 - 127);
        auto *scp = static_cast<float *>(sc.get_data_handle());
        for (int i = 0; i < x.N; i++) scp[i] = 1e-3f;
        *static_cast<int *>(zp.get_data_handle()) = 3;
        reorder(B0, B).execute(s, B0, B); /* the weights in oneDNN's layout, once */
        matmul mm(pd);
        auto call = [&] {
            mm.execute(s, {{DNNL_ARG_SRC, A},
                           {DNNL_ARG_WEIGHTS, B},
                           {DNNL_ARG_DST, C},
                           {DNNL_ARG_ATTR_OUTPUT_SCALES, sc},
                           {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp}});
            s.wait();
        };
        double t0 = wall_now();
        call();
        double one = wall_now() - t0;
        int reps = (int)(0.2 / one) + 1;
        double bw = 1e30, bc = 1e30;
        for (int r = 0; r < 3; r++) {
            double w0 = wall_now(), c0 = cpu_now();
            for (int i = 0; i < reps; i++) call();
            double w = wall_now() - w0, c = cpu_now() - c0;
            bw = w < bw ? w : bw;
            bc = c < bc ? c : bc;
        }
        double gop = 2.0 * x.M * x.K * x.N / 1e9 * reps;
        printf("onednn %-20s %5d x%5d x%5d  GOP/s wall %7.1f  per core %7.1f  (%s)\n", x.name, x.M, x.K, x.N, gop / bw,
               gop / bc, pd.impl_info_str());
    }
    return 0;
}
