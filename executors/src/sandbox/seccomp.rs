//! The seccomp filter every sandbox runs under (bwrap `--seccomp`): the kernel's key
//! management calls (`add_key`, `request_key`, `keyctl`) fail with `ENOSYS`, as if the kernel
//! had no keyrings; every other call is allowed.
//!
//! Keyrings are not namespaced by bwrap: a sandbox inherits the session keyring of whoever
//! started the gateway, and every sandbox of the gateway's user shares it and the user's key
//! quota. Without the filter a job could read keys its launching session stored, leave keys
//! for another tenant's job to find, or use up the quota (200 keys for an ordinary user) so
//! that nothing of that user can add one. Programs that use keyrings (Kerberos, `keyctl`)
//! treat `ENOSYS` as "no keyrings" and fall back to files.
//!
//! The program is classic BPF (`struct sock_filter`), checked per architecture: the native
//! one (with x32's numbers on x86-64) and its 32-bit compatibility one. On architectures not
//! listed here the filter allows everything.

/// One `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;

const ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW
const ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32; // SECCOMP_RET_ERRNO | ENOSYS

/// (`AUDIT_ARCH_*`, mask applied to the syscall number, `add_key`, `request_key`, `keyctl`).
type Denied = (u32, u32, [u32; 3]);

#[cfg(target_arch = "x86_64")]
const DENIED: &[Denied] = &[
    // x86-64, and x32 (the same numbers with bit 30 set).
    (0xc000_003e, !0x4000_0000, [248, 249, 250]),
    // i386 compatibility.
    (0x4000_0003, !0, [286, 287, 288]),
];
#[cfg(target_arch = "aarch64")]
const DENIED: &[Denied] = &[
    (0xc000_00b7, !0, [217, 218, 219]),
    // 32-bit ARM compatibility.
    (0x4000_0028, !0, [309, 310, 311]),
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const DENIED: &[Denied] = &[];

/// The filter as bwrap reads it from `--seccomp FD`: the instructions, native byte order.
pub(crate) fn program() -> Vec<u8> {
    let mut bytes = Vec::new();
    for insn in instructions() {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    bytes
}

fn instructions() -> Vec<Insn> {
    let insn = |code, k| Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let mut out = vec![insn(LD_W_ABS, ARCH)];
    // Each architecture's block: load the number, mask it, compare it with the three calls
    // (a match jumps to the last instruction, the refusal), else allow. The block is skipped
    // when the architecture differs; the accumulator still holds the architecture then.
    let mut refusals = Vec::new();
    for &(arch, mask, calls) in DENIED {
        let block = 1 + usize::from(mask != !0) + calls.len() + 1;
        out.push(Insn {
            code: JEQ_K,
            jt: 0,
            jf: block as u8,
            k: arch,
        });
        out.push(insn(LD_W_ABS, NR));
        if mask != !0 {
            out.push(insn(AND_K, mask));
        }
        for call in calls {
            refusals.push(out.len());
            out.push(insn(JEQ_K, call));
        }
        out.push(insn(RET_K, ALLOW));
    }
    out.push(insn(RET_K, ALLOW));
    let refuse = out.len();
    out.push(insn(RET_K, ENOSYS));
    for at in refusals {
        out[at].jt = (refuse - at - 1) as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on (`arch`, `nr`) as the kernel would: the action it returns.
    fn run(arch: u32, nr: u32) -> u32 {
        let program = instructions();
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = program[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => a = if i.k == ARCH { arch } else { nr },
                AND_K => a &= i.k,
                JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                other => panic!("unknown instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn only_the_key_calls_are_refused_on_each_architecture() {
        for &(arch, mask, calls) in DENIED {
            for call in calls {
                assert_eq!(run(arch, call), ENOSYS, "{arch:#x} {call}");
                if mask != !0 {
                    assert_eq!(run(arch, call | !mask), ENOSYS, "x32 {call}");
                }
            }
            for other in [0, 1, 59, 231, 247, 251, 435] {
                if !calls.contains(&other) {
                    assert_eq!(run(arch, other), ALLOW, "{arch:#x} {other}");
                }
            }
        }
        assert_eq!(run(0x1234, 250), ALLOW, "an architecture not listed");
        assert_eq!(program().len(), instructions().len() * 8);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_native_numbers_are_libcs() {
        let calls = DENIED[0].2.map(i64::from);
        assert_eq!(
            calls,
            [libc::SYS_add_key, libc::SYS_request_key, libc::SYS_keyctl]
        );
    }
}
