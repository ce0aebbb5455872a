//! Inputs bound to views: a model input read by the kernels where it already lies (an imported
//! camera frame, say), instead of copied into the model's arena every run.
//!
//! A file's records name the input's bytes as views of its arena (`arena`, `offset`, `length`
//! within the input's range). Binding input `i` to `length` bytes at `at` of a lease `L` rewrites
//! a copy of the records: every view that lies within the input's range is moved to the same
//! place relative to `at` in `L`, which joins the programs' lease tables after the arenas. A view
//! that crosses the edge of an input's range (part input, part something else) cannot be moved
//! and refuses the binding; so does a binding that would change the alignment the kernels were
//! built for (the view's offset modulo [`ARENA_ALIGN`](hexrpc_hal::ARENA_ALIGN) must be the
//! input's), one of another session, or a lease the model itself owns.
//!
//! The rewrite is a pure function of the records and the bindings, checked again, record by record, by
//! [`Program::new`](hexrpc_runtime::launch::Program::new) and then by the entry on the DSP, so a
//! binding never widens what a kernel can reach beyond the leases of the call.
//!
//! A file written by `python -m hexrpc.export` never has a kernel write its inputs (the exporter
//! refuses such a jit), so a bound input is only read; a file written by other means may,
//! and then the kernel writes the bound buffer (the host cannot tell a view's direction).

use core::fmt;

use hexrpc_drivers::Syscalls;
use hexrpc_hal::Lease;
use hexrpc_runtime::launch::PROGRAM;

/// Something that holds a lease for as long as a model keeps it bound to an input
/// ([`LoadedModel::bind_input`](crate::run::LoadedModel::bind_input)): a
/// [`SharedLease`](hexrpc_hal::SharedLease) (an import, an allocation), or a binding's own
/// lease object.
pub trait LeaseHolder<S: Syscalls + Clone + 'static>: Send + Sync {
    /// The lease.
    fn lease(&self) -> &Lease<'static, S>;
}

impl<S: Syscalls + Clone + Send + Sync + 'static> LeaseHolder<S> for hexrpc_hal::SharedLease<S> {
    fn lease(&self) -> &Lease<'static, S> {
        hexrpc_hal::SharedLease::lease(self)
    }
}

/// Why an input could not be bound to a view (nothing changed: the model runs as before).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindRefusal {
    /// The lease is not of the session the model was opened on.
    OtherSession,
    /// The lease is one of the model's own (an arena or the records lease).
    ModelsOwnLease,
    /// The view `[offset, offset + len)` does not fit the lease of `lease_len` bytes.
    Beyond {
        /// The view's offset in the lease.
        offset: u64,
        /// The input's length.
        len: u64,
        /// The lease's length.
        lease_len: u64,
    },
    /// The view's offset modulo `align` is `got`; the kernels were built for `want`.
    Alignment {
        /// Offset modulo `align` the input has in its arena.
        want: u64,
        /// Offset modulo `align` of the view.
        got: u64,
        /// The arenas' alignment.
        align: u64,
    },
    /// View `view` of record `record` covers part of the input and part of something else.
    Straddles {
        /// The record (in file order).
        record: usize,
        /// The view's index in the record.
        view: usize,
    },
    /// The programs' lease tables cannot take another lease.
    TooManyLeases,
    /// The records do not decode (a file the parser accepted always does).
    Records,
    /// Writing the rewritten records into the records lease failed.
    Write,
}

impl fmt::Display for BindRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindRefusal::OtherSession => write!(f, "the lease is of another session than the model's"),
            BindRefusal::ModelsOwnLease => write!(f, "the lease is one of the model's own (an arena or its records)"),
            BindRefusal::Beyond { offset, len, lease_len } => {
                write!(f, "{len} bytes at offset {offset} do not fit the lease of {lease_len} bytes")
            }
            BindRefusal::Alignment { want, got, align } => write!(
                f,
                "the view's offset is {got} modulo {align}; the model's kernels were built for {want} (move the view by {})",
                (want + align - got) % align
            ),
            BindRefusal::Straddles { record, view } => {
                write!(f, "view {view} of record {record} covers part of the input and part of something else: the input cannot be moved")
            }
            BindRefusal::TooManyLeases => write!(f, "the model's programs cannot take another lease"),
            BindRefusal::Records => write!(f, "the model's records do not decode"),
            BindRefusal::Write => write!(f, "writing the rewritten records into the records lease failed"),
        }
    }
}

/// Where one bound input's bytes are: its arena range, and the lease index and offset it moves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    /// The input's arena (its lease index in the records).
    pub arena: u32,
    /// The input's range in its arena.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// The lease index it moves to.
    pub lease: u32,
    /// Where its first byte is in that lease.
    pub at: u64,
}

/// `records` (whole records of the [`PROGRAM`] form, as a parsed file has them) with every view
/// inside a moved input's range pointing into the input's new lease (see the module docs).
pub(crate) fn rebind(records: &[u8], moves: &[Move]) -> Result<Vec<u8>, BindRefusal> {
    let mut out = records.to_vec();
    let mut at = 0usize;
    let mut record = 0usize;
    while at < records.len() {
        let (_, nv, ns) = PROGRAM.record(records, at).ok_or(BindRefusal::Records)?;
        for v in 0..usize::from(nv) {
            let (lease, offset, len) = PROGRAM.view(records, at, v).ok_or(BindRefusal::Records)?;
            let (lo, hi) = (u64::from(offset), u64::from(offset) + u64::from(len));
            for m in moves.iter().filter(|m| m.arena == lease) {
                let (mlo, mhi) = (m.offset, m.offset + m.len);
                if hi <= mlo || lo >= mhi || len == 0 {
                    continue;
                }
                if lo < mlo || hi > mhi {
                    return Err(BindRefusal::Straddles { record, view: v });
                }
                let moved = u32::try_from(m.at + (lo - mlo)).map_err(|_| BindRefusal::Beyond { offset: m.at, len: m.len, lease_len: 0 })?;
                let e = at + PROGRAM.view_at(v);
                out[e + PROGRAM.view_lease_at..e + PROGRAM.view_lease_at + 4].copy_from_slice(&m.lease.to_le_bytes());
                out[e + PROGRAM.view_offset_at..e + PROGRAM.view_offset_at + 4].copy_from_slice(&moved.to_le_bytes());
            }
        }
        at = at.checked_add(PROGRAM.record_len(usize::from(nv), usize::from(ns))).ok_or(BindRefusal::Records)?;
        record += 1;
    }
    if at != records.len() {
        return Err(BindRefusal::Records);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode_record;

    fn records(views: &[&[(u32, u32, u32)]]) -> Vec<u8> {
        views.iter().flat_map(|v| encode_record(0, v, &[7]).unwrap()).collect()
    }

    fn views_of(records: &[u8]) -> Vec<Vec<(u32, u32, u32)>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < records.len() {
            let (_, nv, ns) = PROGRAM.record(records, at).unwrap();
            out.push((0..usize::from(nv)).map(|v| PROGRAM.view(records, at, v).unwrap()).collect());
            at += PROGRAM.record_len(usize::from(nv), usize::from(ns));
        }
        out
    }

    const INPUT: Move = Move { arena: 0, offset: 256, len: 512, lease: 2, at: 4096 };

    #[test]
    fn views_within_the_input_move_and_nothing_else_does() {
        let r = records(&[&[(0, 256, 512), (1, 0, 64)], &[(0, 384, 128), (0, 768, 64), (0, 0, 256)]]);
        let got = views_of(&rebind(&r, &[INPUT]).unwrap());
        assert_eq!(got, vec![vec![(2, 4096, 512), (1, 0, 64)], vec![(2, 4224, 128), (0, 768, 64), (0, 0, 256)]]);
        // The scalars are untouched.
        let moved = rebind(&r, &[INPUT]).unwrap();
        assert_eq!(moved.len(), r.len());
        assert_eq!(
            PROGRAM.scalar(&moved, 0, 2, 0, hexrpc_runtime::launch::ScalarType::U64),
            PROGRAM.scalar(&r, 0, 2, 0, hexrpc_runtime::launch::ScalarType::U64)
        );
    }

    #[test]
    fn no_move_is_the_identity() {
        let r = records(&[&[(0, 256, 512), (1, 0, 64)]]);
        assert_eq!(rebind(&r, &[]).unwrap(), r);
        // Another arena's same range does not move.
        assert_eq!(rebind(&r, &[Move { arena: 3, ..INPUT }]).unwrap(), r);
    }

    #[test]
    fn a_view_across_the_inputs_edge_is_refused() {
        for edge in [(0, 128, 256), (0, 700, 128), (0, 0, 4096)] {
            let r = records(&[&[(1, 0, 64)], &[(1, 0, 8), edge]]);
            assert_eq!(rebind(&r, &[INPUT]), Err(BindRefusal::Straddles { record: 1, view: 1 }), "{edge:?}");
        }
    }

    #[test]
    fn cut_records_are_refused_never_a_panic() {
        let r = records(&[&[(0, 256, 512)]]);
        for cut in 1..r.len() {
            assert_eq!(rebind(&r[..cut], &[INPUT]), Err(BindRefusal::Records), "cut at {cut}");
        }
    }
}
