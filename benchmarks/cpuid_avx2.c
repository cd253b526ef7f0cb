/* CPUID answers with AVX-512 and VNNI (or VNNI alone) hidden, for a library whose CPUID
 * instructions were patched.
 *
 * Used by benchmarks/ort_isa.py to run ONNX Runtime on its AVX2 int8 kernels on a CPU that has
 * AVX-512 VNNI: ONNX Runtime picks its kernels from CPUID and has no switch for it. ort_isa.py
 * replaces each `cpuid` (0F A2) in a copy of ONNX Runtime's library with `int3; nop` (CC 90).
 * The SIGTRAP handler below runs the real CPUID for the trapped leaf and sub-leaf, clears the
 * feature bits of the mode (cpuid_avx2_set_mode), and resumes after the nop. Any other SIGTRAP
 * gets the default action (a core dump), as it would have without this handler.
 *
 * Built by ort_isa.py with the system cc as a shared library; loaded with ctypes. */
#define _GNU_SOURCE
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#define BIT(n) (1u << (n))

/* CPUID.(EAX=7, ECX=0): AVX512F, DQ, IFMA, PF, ER, CD, BW, VL in EBX; VBMI, VBMI2, VNNI,
 * BITALG, VPOPCNTDQ in ECX; 4VNNIW, 4FMAPS, VP2INTERSECT, AMX-BF16, AVX512-FP16, AMX-TILE,
 * AMX-INT8 in EDX. */
static const uint32_t LEAF7_EBX_HIDDEN = BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31);
static const uint32_t LEAF7_ECX_HIDDEN = BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14);
static const uint32_t LEAF7_EDX_HIDDEN = BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25);
/* CPUID.(EAX=7, ECX=1): AVX-VNNI, AVX512-BF16, AVX-IFMA in EAX; AVX-VNNI-INT8, AVX-NE-CONVERT,
 * AVX-VNNI-INT16 in EDX. */
static const uint32_t LEAF7_1_EAX_HIDDEN = BIT(4) | BIT(5) | BIT(23);
static const uint32_t LEAF7_1_EDX_HIDDEN = BIT(4) | BIT(5) | BIT(10);

/* What the answers keep (cpuid_avx2_set_mode). */
enum { KEEP_AVX2, KEEP_AVX_VNNI, KEEP_AVX512_CORE };
/* KEEP_AVX512_CORE: AVX-512 F, CD, BW, DQ and VL stay (Intel Skylake-SP's set, the first Xeon
 * Scalable CPUs, which have no VNNI); the later extensions go with VNNI and AMX. */
static const uint32_t LEAF7_EBX_CORE = BIT(16) | BIT(17) | BIT(28) | BIT(30) | BIT(31);

static volatile sig_atomic_t answered; /* CPUID instructions emulated so far */
static volatile sig_atomic_t mode = KEEP_AVX2;

static void on_sigtrap(int sig, siginfo_t* info, void* context) {
  (void)info;
  greg_t* regs = ((ucontext_t*)context)->uc_mcontext.gregs;
  const unsigned char* next = (const unsigned char*)regs[REG_RIP]; /* just after the int3 */
  if (next[-1] != 0xCC || next[0] != 0x90) {
    signal(sig, SIG_DFL); /* not a patched CPUID: returning re-runs the trap unhandled */
    return;
  }
  unsigned leaf = (unsigned)regs[REG_RAX], subleaf = (unsigned)regs[REG_RCX];
  unsigned eax, ebx, ecx, edx;
  __cpuid_count(leaf, subleaf, eax, ebx, ecx, edx);
  if (leaf == 7 && subleaf == 0) {
    ebx &= ~(LEAF7_EBX_HIDDEN & ~(mode == KEEP_AVX512_CORE ? LEAF7_EBX_CORE : 0u));
    ecx &= ~LEAF7_ECX_HIDDEN;
    edx &= ~LEAF7_EDX_HIDDEN;
  } else if (leaf == 7 && subleaf == 1) {
    eax &= ~(LEAF7_1_EAX_HIDDEN & ~(mode == KEEP_AVX_VNNI ? BIT(4) : 0u));
    edx &= ~LEAF7_1_EDX_HIDDEN;
  }
  /* CPUID writes the 32-bit registers, which zeroes the upper halves. */
  regs[REG_RAX] = eax;
  regs[REG_RBX] = ebx;
  regs[REG_RCX] = ecx;
  regs[REG_RDX] = edx;
  regs[REG_RIP] += 1; /* over the nop */
  answered = answered + 1;
}

/* Installs the handler; 0 on success. */
int cpuid_avx2_install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_sigtrap;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  return sigaction(SIGTRAP, &action, NULL);
}

/* What the answers keep besides AVX2: 0 nothing (an AVX2-only CPU, the default), 1 AVX-VNNI
 * (256-bit VNNI: a CPU of AVX2 and AVX-VNNI without AVX-512, as Intel's client cores since Alder
 * Lake), 2 AVX-512 F/CD/BW/DQ/VL (an AVX-512 CPU without VNNI, as Intel's Skylake-SP). Call
 * before the first answer; 0 on success, -1 for another value. */
int cpuid_avx2_set_mode(int keep) {
  if (keep < KEEP_AVX2 || keep > KEEP_AVX512_CORE) return -1;
  mode = keep;
  return 0;
}

/* How many patched CPUID instructions have been answered. */
long cpuid_avx2_answered(void) { return (long)answered; }
