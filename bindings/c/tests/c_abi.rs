//! The C ABI called as C calls it, on the bench: launches at non-zero offsets, and every kind of
//! handle misuse (NULL, forged, wrong kind, double free, use after close, close while another
//! thread launches) answered with a status, never undefined behaviour.

use std::ffi::CStr;
use std::ptr::{null, null_mut};

use hexrpc::*;

fn last() -> String {
    // SAFETY: the returned pointer is a NUL-terminated string valid until the next failure.
    unsafe { CStr::from_ptr(hexrpc_last_error_message()) }.to_string_lossy().into_owned()
}

fn ok(st: hexrpc_status) {
    assert_eq!(st, hexrpc_status::HEXRPC_OK, "{}", last());
}

struct Fixture {
    session: *mut hexrpc_session,
    library: *mut hexrpc_library,
    lease: *mut hexrpc_lease,
    mem: *mut u8,
}

fn fixture() -> Fixture {
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    let (mut image, mut len) = (null(), 0usize);
    // SAFETY: NUL-terminated model name, out pointers valid.
    ok(unsafe { hexrpc_bench_model_image(c"add_u8".as_ptr(), &mut image, &mut len) });
    let mut library = null_mut();
    // SAFETY: strings NUL-terminated, image valid for len bytes, out pointer valid.
    ok(unsafe { hexrpc_library_open(session, c"add".as_ptr(), image, len, c"buf,buf,u32".as_ptr(), HEXRPC_ABI_V2, &mut library) });
    let mut lease = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_lease_alloc(session, 8192, &mut lease) });
    let mut mem = null_mut();
    // SAFETY: out pointers valid (length may be NULL).
    ok(unsafe { hexrpc_lease_memory(lease, &mut mem, null_mut()) });
    Fixture { session, library, lease, mem: mem.cast() }
}

fn launch(lib: *mut hexrpc_library, lease: *const hexrpc_lease, k: u32) -> hexrpc_status {
    let views = [hexrpc_view { lease, offset: 100, length: 50 }, hexrpc_view { lease, offset: 4096 + 7, length: 50 }];
    let sc = [hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: u64::from(k) }];
    let mut us = 0;
    // SAFETY: arrays valid for their lengths, out pointer valid.
    unsafe { hexrpc_launch(lib, views.as_ptr(), 2, sc.as_ptr(), 1, 0, &mut us) }
}

#[test]
fn launches_at_offsets_write_the_outputs() {
    let f = fixture();
    for i in 0..50 {
        // SAFETY: the lease's memory is 8192 bytes, mapped while the lease lives; no launch runs.
        unsafe { f.mem.add(100 + i).write(i as u8) };
    }
    ok(launch(f.library, f.lease, 9));
    for i in 0..50 {
        // SAFETY: as above; the launch has returned.
        assert_eq!(unsafe { f.mem.add(4096 + 7 + i).read() }, i as u8 + 9);
    }
    ok(hexrpc_session_close(f.session));
}

#[test]
fn misuse_is_a_status_never_undefined_behaviour() {
    let f = fixture();
    let forged = 0xdead_beef_usize as *mut hexrpc_lease;
    assert_eq!(hexrpc_lease_free(null_mut()), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(hexrpc_lease_free(forged), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert!(last().starts_with("handle: "), "{}", last());
    // SAFETY: CStr from a static string.
    assert_eq!(unsafe { CStr::from_ptr(hexrpc_last_error_stage()) }, c"handle");
    assert_eq!(hexrpc_last_error_status(), hexrpc_status::HEXRPC_ERR_HANDLE);
    // A handle of another kind.
    assert_eq!(hexrpc_library_close(f.lease.cast()), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(hexrpc_session_close(f.library.cast()), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(launch(f.library, f.session.cast(), 1), hexrpc_status::HEXRPC_ERR_HANDLE);
    // NULL arguments.
    // SAFETY: NULL is allowed and reported.
    assert_eq!(unsafe { hexrpc_lease_alloc(f.session, 64, null_mut()) }, hexrpc_status::HEXRPC_ERR_NULL);
    // SAFETY: NULL views with a non-zero count are reported.
    assert_eq!(unsafe { hexrpc_launch(f.library, null(), 2, null(), 0, 0, null_mut()) }, hexrpc_status::HEXRPC_ERR_NULL);
    // SAFETY: a NULL out pointer is reported (a NULL board means "detect it").
    assert_eq!(unsafe { hexrpc_session_open(null(), null_mut()) }, hexrpc_status::HEXRPC_ERR_NULL);
    // Refusals name the stage.
    let bad = [hexrpc_scalar { kind: 99, reserved: 0, bits: 0 }];
    let views = [hexrpc_view { lease: f.lease, offset: 0, length: 8 }; 2];
    // SAFETY: arrays valid for their lengths.
    assert_eq!(unsafe { hexrpc_launch(f.library, views.as_ptr(), 2, bad.as_ptr(), 1, 0, null_mut()) }, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().starts_with("launch-pack: "), "{}", last());
    // Double free, use after free, use after close.
    ok(hexrpc_lease_free(f.lease));
    assert_eq!(hexrpc_lease_free(f.lease), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(launch(f.library, f.lease, 1), hexrpc_status::HEXRPC_ERR_HANDLE);
    ok(hexrpc_session_close(f.session));
    assert_eq!(hexrpc_session_close(f.session), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(hexrpc_library_close(f.library), hexrpc_status::HEXRPC_ERR_HANDLE, "closed with its session");
    assert_eq!(hexrpc_session_recover(f.session), hexrpc_status::HEXRPC_ERR_HANDLE);
    // A reused slot does not revive an old handle.
    let g = fixture();
    assert_eq!(launch(f.library, g.lease, 1), hexrpc_status::HEXRPC_ERR_HANDLE);
    ok(launch(g.library, g.lease, 1));
    ok(hexrpc_session_close(g.session));
}

#[test]
fn closing_while_other_threads_launch_is_safe() {
    let f = fixture();
    let (lib, lease, session) = (f.library as usize, f.lease as usize, f.session as usize);
    let threads: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let mut launched = 0;
                loop {
                    match launch(lib as *mut hexrpc_library, lease as *const hexrpc_lease, 1) {
                        hexrpc_status::HEXRPC_OK => launched += 1,
                        hexrpc_status::HEXRPC_ERR_HANDLE => return launched,
                        other => panic!("unexpected {other:?}: {}", last()),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    ok(hexrpc_session_close(session as *mut hexrpc_session));
    let total: u32 = threads.into_iter().map(|t| t.join().expect("no panic")).sum();
    assert!(total > 0, "some launches ran before the close");
}

/// Every field of a scalar is checked before anything is sent: the kind, `reserved` (zero, as
/// the header says), and bits that fit the kind (nothing truncated); the last error names the
/// scalar's index and the field.
#[test]
fn malformed_scalars_are_refused_naming_the_scalar_and_the_field() {
    let f = fixture();
    let views = [hexrpc_view { lease: f.lease, offset: 100, length: 50 }, hexrpc_view { lease: f.lease, offset: 4096 + 7, length: 50 }];
    let launch_with = |s: hexrpc_scalar| {
        let sc = [s];
        // SAFETY: arrays valid for their lengths.
        unsafe { hexrpc_launch(f.library, views.as_ptr(), 2, sc.as_ptr(), 1, 0, null_mut()) }
    };
    let u32_of = |bits: u64| hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits };
    for (s, needle) in [
        (hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 1, bits: 1 }, "scalar 0: reserved: 0x1, must be 0"),
        (u32_of(1 << 32), "scalar 0: bits: 0x100000000 does not fit u32"),
        (u32_of(u64::MAX), "scalar 0: bits: 0xffffffffffffffff does not fit u32"),
        (hexrpc_scalar { kind: 99, reserved: 0, bits: 1 }, "scalar 0: kind: unknown type 99"),
    ] {
        assert_eq!(launch_with(s), hexrpc_status::HEXRPC_ERR_INVALID, "{s:?}");
        assert!(last().starts_with("launch-pack: ") && last().contains(needle), "{s:?}: {}", last());
    }
    for i in 0..50 {
        // SAFETY: the lease's memory is 8192 bytes, mapped while the lease lives; no launch runs.
        unsafe { f.mem.add(100 + i).write(i as u8 + 1) };
    }
    // Nothing was launched: the output view is still zero.
    // SAFETY: as above.
    assert!((0..50).all(|i| unsafe { f.mem.add(4096 + 7 + i).read() } == 0));
    // The widest value that fits is taken as it is (2^32 - 1 added to each byte: minus one).
    ok(launch_with(u32_of(u64::from(u32::MAX))));
    for i in 0..50 {
        // SAFETY: as above; the launch has returned.
        assert_eq!(unsafe { f.mem.add(4096 + 7 + i).read() }, i as u8, "byte {i}");
    }
    // A later scalar's index is named.
    let two = [u32_of(1), hexrpc_scalar { kind: HEXRPC_SCALAR_I8, reserved: 0, bits: (-1i64) as u64 }];
    // SAFETY: arrays valid for their lengths.
    let st = unsafe { hexrpc_launch(f.library, views.as_ptr(), 2, two.as_ptr(), 2, 0, null_mut()) };
    assert_eq!(st, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().contains("scalar 1: bits: 0xffffffffffffffff does not fit i8"), "{}", last());
    ok(hexrpc_session_close(f.session));
}

/// `image` with a build record appended as a note section (what `hexrpc build-lib` writes):
/// `kernels` as (name, signature), `batches` whether the entry runs batches over them.
fn with_record(image: &[u8], kernels: &[(&str, &str)], batches: bool) -> Vec<u8> {
    use hexrpc_runtime::launch::{record::write_record_asm, AbiVersion, Signature};
    let sigs: Vec<Signature> = kernels.iter().map(|(_, s)| Signature::parse(s).unwrap()).collect();
    let listed: Vec<(&str, &Signature)> = kernels.iter().map(|(n, _)| *n).zip(&sigs).collect();
    let mut asm = String::new();
    write_record_asm(&mut asm, AbiVersion::V2, &listed, batches).unwrap();
    // The `.byte` lines, assembled.
    let note: Vec<u8> = asm
        .lines()
        .filter_map(|l| l.trim().strip_prefix(".byte "))
        .flat_map(|l| l.split(", ").map(|b| b.parse::<u8>().unwrap()).collect::<Vec<_>>())
        .collect();
    let mut img = image.to_vec();
    while !img.len().is_multiple_of(4) {
        img.push(0);
    }
    let note_off = img.len();
    img.extend_from_slice(&note);
    let shoff = img.len();
    // Section table: the null section and one SHT_NOTE.
    img[32..36].copy_from_slice(&(shoff as u32).to_le_bytes());
    img[46..48].copy_from_slice(&40u16.to_le_bytes());
    img[48..50].copy_from_slice(&2u16.to_le_bytes());
    img.extend_from_slice(&[0u8; 40]);
    let mut sh = [0u8; 40];
    sh[4..8].copy_from_slice(&hexrpc_drivers::elf::SHT_NOTE.to_le_bytes());
    sh[16..20].copy_from_slice(&(note_off as u32).to_le_bytes());
    sh[20..24].copy_from_slice(&(note.len() as u32).to_le_bytes());
    img.extend_from_slice(&sh);
    img
}

fn model(name: &std::ffi::CStr) -> &'static [u8] {
    let (mut image, mut len) = (null(), 0usize);
    // SAFETY: NUL-terminated model name, out pointers valid.
    ok(unsafe { hexrpc_bench_model_image(name.as_ptr(), &mut image, &mut len) });
    // SAFETY: the bench's model images live as long as the process.
    unsafe { std::slice::from_raw_parts(image, len) }
}

fn open(session: *mut hexrpc_session, image: &[u8]) -> *mut hexrpc_library {
    let mut library = null_mut();
    // SAFETY: strings NUL-terminated, image valid for its length, out pointer valid.
    ok(unsafe { hexrpc_library_open(session, c"lib".as_ptr(), image.as_ptr(), image.len(), null(), HEXRPC_ABI_RECORDED, &mut library) });
    library
}

fn batch_new(library: *mut hexrpc_library, kernels: &[&std::ffi::CStr]) -> (hexrpc_status, *mut hexrpc_batch) {
    let ptrs: Vec<*const std::ffi::c_char> = kernels.iter().map(|k| k.as_ptr()).collect();
    let mut b = null_mut();
    // SAFETY: `ptrs` holds `kernels.len()` NUL-terminated strings; out pointer valid.
    let st = unsafe { hexrpc_batch_new(library, ptrs.as_ptr(), ptrs.len(), &mut b) };
    (st, b)
}

#[test]
fn a_batch_on_a_library_without_a_kernel_table_is_refused_when_it_is_made() {
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    // A single-kernel library (its build record says so): refused at hexrpc_batch_new, before
    // any record is pushed or anything is sent.
    let single = open(session, &with_record(model(c"add_u8"), &[("add_u8", "buf,buf,u32")], false));
    let (st, b) = batch_new(single, &[c"buf,buf,u32"]);
    assert_eq!(st, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(b.is_null());
    assert!(last().contains("no kernel table") && last().contains("--table"), "{}", last());
    // The same model as a one-kernel table (its record says the entry runs batches): accepted,
    // and it runs.
    let table = open(session, &with_record(model(c"add_u8_table"), &[("add_u8", "buf,buf,u32")], true));
    // Another table than the recorded one: refused at once too.
    let (st, _) = batch_new(table, &[c"buf,buf,u32", c"buf,u32"]);
    assert_eq!(st, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().contains("not the library's kernel table"), "{}", last());
    let (st, b) = batch_new(table, &[c"buf,buf,u32"]);
    ok(st);
    let mut lease = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_lease_alloc(session, 8192, &mut lease) });
    let views = [hexrpc_view { lease, offset: 1, length: 16 }, hexrpc_view { lease, offset: 4097, length: 16 }];
    let sc = [hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: 5 }];
    let mut rec = 0;
    // SAFETY: arrays valid for their lengths, out pointer valid.
    ok(unsafe { hexrpc_batch_push(b, 0, views.as_ptr(), 2, sc.as_ptr(), 1, &mut rec) });
    let mut us = 0;
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_batch_run(b, 0, &mut us) });
    // A library without a build record (built elsewhere, as the bench's models are) cannot be
    // judged at the open: accepted here, as before.
    let unrecorded = open_with(session, model(c"add_u8_table"), c"buf,buf,u32");
    let (st, b2) = batch_new(unrecorded, &[c"buf,buf,u32"]);
    ok(st);
    ok(hexrpc_batch_free(b2));
    ok(hexrpc_batch_free(b));
    ok(hexrpc_session_close(session));
}

fn open_with(session: *mut hexrpc_session, image: &[u8], signature: &std::ffi::CStr) -> *mut hexrpc_library {
    let mut library = null_mut();
    // SAFETY: strings NUL-terminated, image valid for its length, out pointer valid.
    ok(unsafe {
        hexrpc_library_open(session, c"lib".as_ptr(), image.as_ptr(), image.len(), signature.as_ptr(), HEXRPC_ABI_V2, &mut library)
    });
    library
}

fn arena_alloc(arena: *mut hexrpc_arena, len: usize, align: usize) -> (hexrpc_status, *mut hexrpc_lease) {
    let mut sub = null_mut();
    // SAFETY: out pointer valid.
    let st = unsafe { hexrpc_arena_alloc(arena, len, align, &mut sub) };
    (st, sub)
}

fn arena_stats(arena: *mut hexrpc_arena) -> hexrpc_arena_stats {
    let mut st = hexrpc_arena_stats::default();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_arena_get_stats(arena, &mut st) });
    st
}

#[test]
fn arena_sub_allocations_are_leases_at_offsets_of_one_lease() {
    let f = fixture();
    let mut arena = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_arena_new(f.session, 64 * 1024, &mut arena) });
    let st = arena_stats(arena);
    assert_eq!((st.capacity, st.used, st.live, st.blocks), (64 * 1024, 0, 0, HEXRPC_ARENA_BLOCKS));
    let (s, a) = arena_alloc(arena, 300, 0);
    ok(s);
    let (s, b) = arena_alloc(arena, 8000, 4096);
    ok(s);
    let (mut pa, mut la, mut pb, mut lb) = (null_mut(), 0usize, null_mut(), 0usize);
    // SAFETY: out pointers valid.
    ok(unsafe { hexrpc_lease_memory(a, &mut pa, &mut la) });
    // SAFETY: out pointers valid.
    ok(unsafe { hexrpc_lease_memory(b, &mut pb, &mut lb) });
    assert_eq!((la, lb), (300, 8000));
    assert_eq!(pa as usize % HEXRPC_ARENA_ALIGN, 0);
    assert_eq!(pb as usize % 4096, 0);
    let (pa, pb) = (pa.cast::<u8>(), pb.cast::<u8>());
    for i in 0..50 {
        // SAFETY: `a`'s memory is 300 bytes, mapped while the arena lives; no launch runs.
        unsafe { pa.add(100 + i).write(i as u8) };
    }
    // A launch whose views are offsets of two sub-allocations: add_u8 reads a[100..150] and
    // writes b[4103..4153] (the fixture's view offsets 100 and 4096 + 7).
    let views = [hexrpc_view { lease: a, offset: 100, length: 50 }, hexrpc_view { lease: b, offset: 4096 + 7, length: 50 }];
    let sc = [hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: 9 }];
    let mut us = 0;
    // SAFETY: arrays valid for their lengths, out pointer valid.
    ok(unsafe { hexrpc_launch(f.library, views.as_ptr(), 2, sc.as_ptr(), 1, 0, &mut us) });
    for i in 0..50 {
        // SAFETY: inside `b`'s 8000 bytes; the launch has returned.
        assert_eq!(unsafe { pb.add(4103 + i).read() }, i as u8 + 9);
    }
    // Views are checked against the sub-allocation, not the arena.
    let past = [hexrpc_view { lease: a, offset: 280, length: 50 }, hexrpc_view { lease: b, offset: 0, length: 50 }];
    // SAFETY: arrays valid for their lengths, out pointer valid.
    assert_eq!(unsafe { hexrpc_launch(f.library, past.as_ptr(), 2, sc.as_ptr(), 1, 0, &mut us) }, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().contains("arena buffer of 300 bytes"), "{}", last());
    // Typed refusals.
    let (s, none) = arena_alloc(arena, 1 << 20, 0);
    assert_eq!(s, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(none.is_null() && last().contains("largest free range"), "{}", last());
    assert_eq!(arena_alloc(arena, 0, 0).0, hexrpc_status::HEXRPC_ERR_INVALID);
    assert_eq!(arena_alloc(arena, 64, 3).0, hexrpc_status::HEXRPC_ERR_INVALID);
    // Freeing a sub-allocation gives its range back; the arena handle may go first.
    ok(hexrpc_lease_free(a));
    assert_eq!(arena_stats(arena).live, 1);
    ok(hexrpc_arena_free(arena));
    assert_eq!(hexrpc_arena_free(arena), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(arena_alloc(arena, 64, 0).0, hexrpc_status::HEXRPC_ERR_HANDLE);
    // `b` still works after its arena's handle is gone (the arena lives while a buffer does).
    // SAFETY: arrays valid for their lengths, out pointer valid.
    let views = [hexrpc_view { lease: b, offset: 0, length: 50 }, hexrpc_view { lease: b, offset: 4096 + 7, length: 50 }];
    // SAFETY: arrays valid for their lengths, out pointer valid.
    ok(unsafe { hexrpc_launch(f.library, views.as_ptr(), 2, sc.as_ptr(), 1, 0, &mut us) });
    // An arena handle is not a lease handle, nor the reverse.
    let mut arena2 = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_arena_new(f.session, 4096, &mut arena2) });
    assert_eq!(hexrpc_lease_free(arena2.cast()), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(hexrpc_arena_free(b.cast()), hexrpc_status::HEXRPC_ERR_HANDLE);
    // Closing the session frees the arena and its buffers.
    ok(hexrpc_session_close(f.session));
    assert_eq!(hexrpc_lease_free(b), hexrpc_status::HEXRPC_ERR_HANDLE);
    assert_eq!(hexrpc_arena_free(arena2), hexrpc_status::HEXRPC_ERR_HANDLE);
}

#[test]
fn a_batch_counts_the_buffers_of_one_arena_as_one_lease() {
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    let table = open(session, &with_record(model(c"add_u8_table"), &[("add_u8", "buf,buf,u32")], true));
    let (st, b) = batch_new(table, &[c"buf,buf,u32"]);
    ok(st);
    let mut arena = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_arena_new(session, 1 << 20, &mut arena) });
    // 2 * 20 sub-allocations, far more than the batch's distinct leases: one lease.
    let subs: Vec<_> = (0..40).map(|_| arena_alloc(arena, 256, 0)).map(|(s, l)| (ok(s), l).1).collect();
    assert!(subs.len() > MAX_LEASES_OF_A_BATCH);
    let sc = [hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: 1 }];
    for pair in subs.chunks(2) {
        let views = [hexrpc_view { lease: pair[0], offset: 0, length: 16 }, hexrpc_view { lease: pair[1], offset: 0, length: 16 }];
        let mut rec = 0;
        // SAFETY: arrays valid for their lengths, out pointer valid.
        ok(unsafe { hexrpc_batch_push(b, 0, views.as_ptr(), 2, sc.as_ptr(), 1, &mut rec) });
    }
    let mut us = 0;
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_batch_run(b, 0, &mut us) });
    // set_view to another buffer of the arena keeps the count; to a lease of its own adds one.
    let (s, extra) = arena_alloc(arena, 64, 0);
    ok(s);
    ok(hexrpc_batch_set_view(b, 0, 0, hexrpc_view { lease: extra, offset: 0, length: 16 }));
    ok(hexrpc_batch_free(b));
    ok(hexrpc_session_close(session));
}

/// hexrpc-runtime's MAX_BATCH_LEASES (the FastRPC limit of 15 in-handles).
const MAX_LEASES_OF_A_BATCH: usize = 15;

fn sample_model(session: *mut hexrpc_session, n: usize) -> *mut hexrpc_model {
    let (mut bytes, mut len) = (null(), 0usize);
    // SAFETY: out pointers valid.
    ok(unsafe { hexrpc_bench_sample_model(n, &mut bytes, &mut len) });
    let mut model = null_mut();
    // SAFETY: `bytes` is valid for `len` bytes (static), out pointer valid.
    ok(unsafe { hexrpc_model_open(session, bytes, len, &mut model) });
    model
}

fn tensor(model: *mut hexrpc_model, index: usize, output: bool) -> (String, hexrpc_tensor) {
    // SAFETY: all-zero is a valid (null-named) descriptor to overwrite.
    let mut t: hexrpc_tensor = unsafe { std::mem::zeroed() };
    // SAFETY: out pointer valid.
    ok(unsafe {
        if output {
            hexrpc_model_output(model, index, &mut t)
        } else {
            hexrpc_model_input(model, index, &mut t)
        }
    });
    // SAFETY: the name is NUL-terminated and lives until the model is closed.
    (unsafe { CStr::from_ptr(t.name) }.to_string_lossy().into_owned(), t)
}

#[test]
fn a_model_file_opens_describes_itself_and_runs_in_one_call() {
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    let model = sample_model(session, 1000);
    let (mut ni, mut no) = (0, 0);
    // SAFETY: out pointers valid.
    ok(unsafe { hexrpc_model_io_count(model, &mut ni, &mut no) });
    assert_eq!((ni, no), (1, 2));
    let (name, x) = tensor(model, 0, false);
    assert_eq!((name.as_str(), x.dtype, x.rank, &x.shape[..3], x.bytes), ("x", HEXRPC_DTYPE_UINT8, 2, &[1, 1000, 0][..], 1000));
    assert_eq!(tensor(model, 1, true).0, "z");
    let input: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    let (mut y, mut z) = (vec![0u8; 1000], vec![0u8; 1000]);
    for _ in 0..3 {
        let ins = [hexrpc_input { data: input.as_ptr().cast(), len: 1000 }];
        let outs = [hexrpc_output { data: y.as_mut_ptr().cast(), len: 1000 }, hexrpc_output { data: z.as_mut_ptr().cast(), len: 1000 }];
        let mut report = hexrpc_model_report::default();
        // SAFETY: arrays valid for their counts, each buffer valid for its length.
        ok(unsafe { hexrpc_model_run(model, ins.as_ptr(), 1, outs.as_ptr(), 2, 5000, &mut report) });
        assert_eq!((report.launches, report.calls), (2, 1));
        assert!(input.iter().zip(&y).all(|(a, b)| *b == a.wrapping_add(3)));
        assert!(input.iter().zip(&z).all(|(a, b)| *b == a.wrapping_add(8)));
    }
    // Misuse: a status naming what is wrong, nothing sent.
    let ins = [hexrpc_input { data: input.as_ptr().cast(), len: 999 }];
    let outs = [hexrpc_output { data: y.as_mut_ptr().cast(), len: 1000 }, hexrpc_output { data: z.as_mut_ptr().cast(), len: 1000 }];
    // SAFETY: arrays valid for their counts.
    let st = unsafe { hexrpc_model_run(model, ins.as_ptr(), 1, outs.as_ptr(), 2, 0, null_mut()) };
    assert_eq!(st, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().contains("\"x\" needs 1000 bytes"), "{}", last());
    // SAFETY: arrays valid for their counts.
    let st = unsafe { hexrpc_model_run(model, ins.as_ptr(), 1, outs.as_ptr(), 1, 0, null_mut()) };
    assert_eq!(st, hexrpc_status::HEXRPC_ERR_INVALID);
    // SAFETY: NULL array with a count: refused.
    assert_eq!(unsafe { hexrpc_model_run(model, null(), 1, outs.as_ptr(), 2, 0, null_mut()) }, hexrpc_status::HEXRPC_ERR_NULL);
    // SAFETY: out pointer valid.
    let mut t: hexrpc_tensor = unsafe { std::mem::zeroed() };
    // SAFETY: out pointer valid.
    assert_eq!(unsafe { hexrpc_model_input(model, 1, &mut t) }, hexrpc_status::HEXRPC_ERR_INVALID);
    // A file that is not a model: refused before anything is sent.
    let mut other = null_mut();
    // SAFETY: a 5-byte array, out pointer valid.
    assert_eq!(unsafe { hexrpc_model_open(session, b"HXMOD".as_ptr(), 5, &mut other) }, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().contains("model file"), "{}", last());
    let mut other = null_mut();
    // SAFETY: NUL-terminated path, out pointer valid.
    assert_eq!(
        unsafe { hexrpc_model_open_path(session, c"/nonexistent/model.hxm".as_ptr(), &mut other) },
        hexrpc_status::HEXRPC_ERR_UNAVAILABLE
    );
    ok(hexrpc_model_close(model));
    assert_eq!(hexrpc_model_close(model), hexrpc_status::HEXRPC_ERR_HANDLE);
    // SAFETY: a closed handle: refused, nothing dereferenced.
    assert_eq!(unsafe { hexrpc_model_io_count(model, &mut ni, &mut no) }, hexrpc_status::HEXRPC_ERR_HANDLE);
    // A model left open is closed with its session.
    let open = sample_model(session, 16);
    ok(hexrpc_session_close(session));
    assert_eq!(hexrpc_model_close(open), hexrpc_status::HEXRPC_ERR_HANDLE);
}

#[test]
fn a_model_opened_from_a_path_runs() {
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    let (mut bytes, mut len) = (null(), 0usize);
    // SAFETY: out pointers valid.
    ok(unsafe { hexrpc_bench_sample_model(64, &mut bytes, &mut len) });
    let path = std::env::temp_dir().join(format!("hexrpc-c-abi-{}.hxm", std::process::id()));
    // SAFETY: static bytes of `len`.
    std::fs::write(&path, unsafe { std::slice::from_raw_parts(bytes, len) }).unwrap();
    let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut model = null_mut();
    // SAFETY: NUL-terminated path, out pointer valid.
    ok(unsafe { hexrpc_model_open_path(session, cpath.as_ptr(), &mut model) });
    let _ = std::fs::remove_file(&path);
    let (x, mut y, mut z) = ([7u8; 64], [0u8; 64], [0u8; 64]);
    let ins = [hexrpc_input { data: x.as_ptr().cast(), len: 64 }];
    let outs = [hexrpc_output { data: y.as_mut_ptr().cast(), len: 64 }, hexrpc_output { data: z.as_mut_ptr().cast(), len: 64 }];
    // SAFETY: arrays valid for their counts.
    ok(unsafe { hexrpc_model_run(model, ins.as_ptr(), 1, outs.as_ptr(), 2, 0, null_mut()) });
    assert_eq!((y, z), ([10u8; 64], [15u8; 64]));
    ok(hexrpc_model_close(model));
    ok(hexrpc_session_close(session));
}

/// The stack a thread that pushes and runs batches needs: the header's
/// `HEXRPC_BATCH_STACK_BYTES`. The batch's records live on the heap, never on the caller's stack.
const SMALL_STACK: usize = 64 * 1024;

#[test]
fn the_largest_batch_pushes_and_runs_on_a_64_kib_thread() {
    assert_eq!(SMALL_STACK as u64, u64::from(HEXRPC_BATCH_STACK_BYTES));
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    let table = open(session, &with_record(model(c"add_u8_table"), &[("add_u8", "buf,buf,u32")], true));
    // The batch's 15 distinct leases, each with 256 bytes of input and of output per record.
    let leases: Vec<(usize, usize)> = (0..MAX_LEASES_OF_A_BATCH)
        .map(|_| {
            let (mut lease, mut mem) = (null_mut(), null_mut());
            // SAFETY: out pointers valid (length may be NULL).
            ok(unsafe { hexrpc_lease_alloc(session, 64 * 1024, &mut lease) });
            // SAFETY: as above.
            ok(unsafe { hexrpc_lease_memory(lease, &mut mem, null_mut()) });
            (lease as usize, mem as usize)
        })
        .collect();
    let table = table as usize;
    let small = std::thread::Builder::new().stack_size(SMALL_STACK);
    let worker = small.spawn(move || {
        let (st, b) = batch_new(table as *mut hexrpc_library, &[c"buf,buf,u32"]);
        ok(st);
        for r in 0..256usize {
            let lease = leases[r % leases.len()].0 as *const hexrpc_lease;
            let at = 256 * (r / leases.len());
            let views = [hexrpc_view { lease, offset: at, length: 64 }, hexrpc_view { lease, offset: 32 * 1024 + at, length: 64 }];
            // SAFETY: the lease's memory is 64 KiB; the offset is below it.
            unsafe { std::ptr::write_bytes((leases[r % leases.len()].1 as *mut u8).add(at), r as u8, 64) };
            let sc = [hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: 1 }];
            let mut rec = 0;
            // SAFETY: arrays valid for their lengths, out pointer valid.
            ok(unsafe { hexrpc_batch_push(b, 0, views.as_ptr(), 2, sc.as_ptr(), 1, &mut rec) });
            assert_eq!(rec, r);
        }
        // One more is past the batch's capacity: refused, and the batch still runs.
        let views = [hexrpc_view { lease: leases[0].0 as *const _, offset: 0, length: 64 }; 2];
        let sc = [hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: 1 }];
        // SAFETY: arrays valid for their lengths, out pointer may be NULL.
        assert_eq!(unsafe { hexrpc_batch_push(b, 0, views.as_ptr(), 2, sc.as_ptr(), 1, null_mut()) }, hexrpc_status::HEXRPC_ERR_REFUSED);
        let mut us = 0;
        // SAFETY: out pointer valid.
        ok(unsafe { hexrpc_batch_run(b, 1000, &mut us) });
        ok(hexrpc_batch_set_scalar(b, 255, 0, hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: 2 }));
        // SAFETY: out pointer may be NULL.
        ok(unsafe { hexrpc_batch_run(b, 0, null_mut()) });
        ok(hexrpc_batch_free(b));
        for r in 0..256usize {
            let at = 256 * (r / leases.len());
            // SAFETY: 64 bytes at 32 KiB + `at` of a 64 KiB lease, written by the DSP's kernel.
            let out = unsafe { std::slice::from_raw_parts((leases[r % leases.len()].1 as *const u8).add(32 * 1024 + at), 64) };
            let add = if r == 255 { 2 } else { 1 };
            assert!(out.iter().all(|&v| v == (r as u8).wrapping_add(add)), "record {r}: {:?}", &out[..4]);
        }
    });
    worker.unwrap().join().expect("the 64 KiB thread ran the batch");
    ok(hexrpc_session_close(session));
}

fn pm_qos(session: *mut hexrpc_session) -> u32 {
    let mut state = u32::MAX;
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_pm_qos(session, &mut state) });
    state
}

#[test]
fn the_latency_policy_word_reaches_the_session_and_bad_words_are_refused() {
    // The default: the PM-QoS vote went out on the bench's comma-three channel, and again on the
    // channel a recovery opens.
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench_with(0, 0, &mut session) });
    assert_eq!(pm_qos(session), HEXRPC_PM_QOS_SENT);
    ok(hexrpc_bench_restart_dsp(session));
    ok(hexrpc_session_recover(session));
    assert_eq!(pm_qos(session), HEXRPC_PM_QOS_SENT);
    ok(hexrpc_session_close(session));
    // No vote asked for.
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench_with(0, HEXRPC_LATENCY_NO_PM_QOS | HEXRPC_LATENCY_POWER_BURST, &mut session) });
    assert_eq!(pm_qos(session), HEXRPC_PM_QOS_NOT_ASKED);
    ok(hexrpc_session_close(session));
    // Words that name nothing, or two clock levels at once, open nothing.
    for bad in [0x100, HEXRPC_LATENCY_POWER_OFF | HEXRPC_LATENCY_POWER_BURST] {
        let mut session = null_mut();
        // SAFETY: out pointer valid.
        let st = unsafe { hexrpc_session_open_bench_with(0, bad, &mut session) };
        assert_eq!(st, hexrpc_status::HEXRPC_ERR_INVALID, "{bad:#x}");
        assert!(session.is_null());
        assert!(last().contains("latency") || last().contains("POWER"), "{}", last());
    }
    let mut state = 0u32;
    // SAFETY: out pointer valid; the handle is forged.
    assert_eq!(unsafe { hexrpc_session_pm_qos(0x1234 as *mut hexrpc_session, &mut state) }, hexrpc_status::HEXRPC_ERR_HANDLE);
}

#[test]
fn a_profiled_model_run_names_each_record_after_its_kernel() {
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    let model = sample_model(session, 100);
    let input: Vec<u8> = (0..100).map(|i| i as u8).collect();
    let (mut y, mut z) = (vec![0u8; 100], vec![0u8; 100]);
    let ins = [hexrpc_input { data: input.as_ptr().cast(), len: 100 }];
    let outs = [hexrpc_output { data: y.as_mut_ptr().cast(), len: 100 }, hexrpc_output { data: z.as_mut_ptr().cast(), len: 100 }];
    let blank = hexrpc_kernel_time { kernel: null(), call: u32::MAX, record: u32::MAX, us: u32::MAX, reserved: 7 };
    let mut times = [blank; 4];
    let (mut report, mut count) = (hexrpc_model_report::default(), 0usize);
    // SAFETY: arrays valid for their counts, each buffer valid for its length, out pointers valid.
    ok(unsafe {
        hexrpc_model_run_profiled(model, ins.as_ptr(), 1, outs.as_ptr(), 2, 5000, &mut report, times.as_mut_ptr(), 4, &mut count)
    });
    assert!(input.iter().zip(&z).all(|(a, b)| *b == a.wrapping_add(8)), "the outputs as a plain run writes them");
    assert_eq!(count as u64, report.launches);
    let mut sum = 0u64;
    for (i, t) in times[..count].iter().enumerate() {
        assert_eq!((t.call, t.record as usize, t.reserved), (0, i, 0));
        assert!(!t.kernel.is_null());
        // SAFETY: the model's NUL-terminated kernel name, alive until it is closed.
        assert!(!unsafe { CStr::from_ptr(t.kernel) }.to_bytes().is_empty());
        sum += u64::from(t.us);
    }
    assert_eq!(sum, report.dsp_us, "the records' times add up to the run's DSP time");
    assert!(times[count..].iter().all(|t| t.us == u32::MAX), "nothing written past the timed records");
    // A smaller array: what fits, and the count of all of them.
    let mut one = [blank; 1];
    // SAFETY: as above; `one` holds 1 entry.
    ok(unsafe { hexrpc_model_run_profiled(model, ins.as_ptr(), 1, outs.as_ptr(), 2, 0, null_mut(), one.as_mut_ptr(), 1, &mut count) });
    assert_eq!((count as u64, one[0].record), (report.launches, 0));
    // A NULL array with a capacity is refused.
    // SAFETY: NULL `times` with a capacity: refused before anything is read.
    let st = unsafe { hexrpc_model_run_profiled(model, ins.as_ptr(), 1, outs.as_ptr(), 2, 0, null_mut(), null_mut(), 3, null_mut()) };
    assert_eq!(st, hexrpc_status::HEXRPC_ERR_NULL);
    ok(hexrpc_model_close(model));
    ok(hexrpc_session_close(session));
}

/// The frame server process: a second, real process that owns a dma-buf (from its own bench's
/// ION), shares its descriptor over a UNIX socket and writes frames into it on request.
const FRAME_SERVER: &str = env!("CARGO_BIN_EXE_hexrpc-ffi-frame-server");
/// The served buffer's length (one page).
const FRAME_LEN: usize = 4096;
/// The sample model's input size: the first `N` bytes of a frame.
const N: usize = 1000;

fn frame_server() -> hexrpc_scenarios::frame_server::FrameServer {
    // The bench sessions of these tests are of the comma three's bench (ION 4.9).
    hexrpc_scenarios::frame_server::FrameServer::spawn(std::path::Path::new(FRAME_SERVER), hexrpc_bsp::BENCH.allocator, FRAME_LEN)
        .expect("start the frame server")
}

fn bench_session() -> *mut hexrpc_session {
    let mut session = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_session_open_bench(0, &mut session) });
    session
}

fn import(session: *mut hexrpc_session, fd: i32, len: usize, flags: u32) -> (hexrpc_status, *mut hexrpc_lease) {
    let mut lease = null_mut();
    // SAFETY: out pointer valid.
    let st = unsafe { hexrpc_session_import(session, fd, len, flags, &mut lease) };
    (st, lease)
}

fn writable(lease: *mut hexrpc_lease) -> u32 {
    let mut w = u32::MAX;
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_lease_writable(lease, &mut w) });
    w
}

fn input_bound(model: *mut hexrpc_model, index: usize) -> u32 {
    let mut b = u32::MAX;
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_model_input_bound(model, index, &mut b) });
    b
}

/// The lease's memory: its address and length.
fn memory(lease: *mut hexrpc_lease) -> (*mut u8, usize) {
    let (mut ptr, mut len) = (null_mut(), 0usize);
    // SAFETY: out pointers valid.
    ok(unsafe { hexrpc_lease_memory(lease, &mut ptr, &mut len) });
    (ptr.cast(), len)
}

/// `len` bytes at `at` of a lease's memory, read one by one (the memory is shared with another
/// process and the DSP: copied out, never referenced).
fn read_shared(lease: *mut hexrpc_lease, at: usize, len: usize) -> Vec<u8> {
    let (ptr, size) = memory(lease);
    assert!(at + len <= size);
    // SAFETY: `at + len` is within the lease's mapped memory, which lives while the lease does.
    (at..at + len).map(|i| unsafe { ptr.add(i).read_volatile() }).collect()
}

/// Writes `bytes` at `at` of a (writable) lease's memory, one by one.
fn write_shared(lease: *mut hexrpc_lease, at: usize, bytes: &[u8]) {
    let (ptr, size) = memory(lease);
    assert!(at + bytes.len() <= size && writable(lease) == 1);
    for (i, b) in bytes.iter().enumerate() {
        // SAFETY: within the lease's memory, which is mapped writable (checked above).
        unsafe { ptr.add(at + i).write_volatile(*b) };
    }
}

/// One run of the sample model (input `x`; outputs `y`, `z`): `x` `None` gives the input as a
/// bound input takes it (data NULL, len 0).
fn run_sample(model: *mut hexrpc_model, x: Option<&[u8]>, y: &mut [u8], z: &mut [u8]) -> Result<hexrpc_model_report, hexrpc_status> {
    let ins = [match x {
        Some(x) => hexrpc_input { data: x.as_ptr().cast(), len: x.len() },
        None => hexrpc_input { data: null(), len: 0 },
    }];
    let outs = [hexrpc_output { data: y.as_mut_ptr().cast(), len: y.len() }, hexrpc_output { data: z.as_mut_ptr().cast(), len: z.len() }];
    let mut report = hexrpc_model_report { launches: 0, calls: 0, input_bytes_copied: u32::MAX, dsp_us: 0 };
    // SAFETY: arrays valid for their counts, each buffer valid for its length.
    match unsafe { hexrpc_model_run(model, ins.as_ptr(), 1, outs.as_ptr(), 2, 5000, &mut report) } {
        hexrpc_status::HEXRPC_OK => Ok(report),
        st => Err(st),
    }
}

fn plus(x: &[u8], k: u8) -> Vec<u8> {
    x.iter().map(|b| b.wrapping_add(k)).collect()
}

/// A frame another process owns, imported read-only and bound to the sample model's input: each
/// run reads the frame written last in place (data NULL, 0 input bytes copied) and gives the
/// outputs a run on the same frame copied in gives; the import launches as any lease does; the
/// caller's descriptor stays open and the caller may close it; the binding outlives the lease's
/// handle and the server; unbound, the input is copied again.
#[test]
fn a_model_input_bound_to_an_imported_frame_runs_with_nothing_copied() {
    use hexrpc_scenarios::frame_server::frame;
    let session = bench_session();
    let mut srv = frame_server();
    srv.write_frame(1).unwrap();
    let fd = srv.fd().0;
    let (st, frame_lease) = import(session, fd, FRAME_LEN, HEXRPC_IMPORT_READ_ONLY);
    ok(st);
    // SAFETY: F_GETFD on a number of this process reads its flags only.
    assert_ne!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1, "the caller's descriptor stays open");
    // The caller closes its number: the import's own duplicate keeps the buffer.
    srv.close_received();
    assert_eq!(writable(frame_lease), 0, "a read-only import is not writable");
    assert_eq!(memory(frame_lease).1, FRAME_LEN);
    assert!(read_shared(frame_lease, 0, FRAME_LEN) == frame(1, FRAME_LEN), "the import's memory is the server's frame");

    // The import is a lease like any other: a launch reads it (add_u8: out = in + 9).
    let add = open_with(session, model(c"add_u8"), c"buf,buf,u32");
    let mut out = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_lease_alloc(session, 4096, &mut out) });
    let views = [hexrpc_view { lease: frame_lease, offset: 256, length: 64 }, hexrpc_view { lease: out, offset: 0, length: 64 }];
    let sc = [hexrpc_scalar { kind: HEXRPC_SCALAR_U32, reserved: 0, bits: 9 }];
    // SAFETY: arrays valid for their lengths; the time may be NULL.
    ok(unsafe { hexrpc_launch(add, views.as_ptr(), 2, sc.as_ptr(), 1, 0, null_mut()) });
    assert_eq!(read_shared(out, 0, 64), plus(&frame(1, FRAME_LEN)[256..320], 9));

    let bound = sample_model(session, N);
    let copying = sample_model(session, N);
    assert_eq!(input_bound(bound, 0), 0);
    ok(hexrpc_model_bind_input(bound, 0, frame_lease, 0));
    assert_eq!((input_bound(bound, 0), input_bound(copying, 0)), (1, 0));
    let (mut y, mut z, mut want_y, mut want_z) = (vec![0u8; N], vec![0u8; N], vec![0u8; N], vec![0u8; N]);
    for n in 2..5u32 {
        srv.write_frame(n).unwrap();
        let r = run_sample(bound, None, &mut y, &mut z).unwrap_or_else(|st| panic!("frame {n}: {st:?}: {}", last()));
        assert_eq!((r.launches, r.calls, r.input_bytes_copied), (2, 1, 0), "frame {n}");
        let x = frame(n, N);
        assert!(y == plus(&x, 3) && z == plus(&x, 8), "frame {n} was not read in place");
        // The same frame copied in, as a service did before imports.
        let r = run_sample(copying, Some(&x), &mut want_y, &mut want_z).unwrap();
        assert_eq!((r.launches, r.calls, r.input_bytes_copied), (2, 1, N as u32), "frame {n}");
        assert!(y == want_y && z == want_z, "frame {n}: the bound run's outputs differ from the copied run's");
    }
    // Bytes for a bound input: refused, nothing run.
    y.fill(0);
    assert_eq!(run_sample(bound, Some(&frame(9, N)), &mut y, &mut z).err(), Some(hexrpc_status::HEXRPC_ERR_INVALID));
    assert!(last().starts_with("model-run: ") && last().contains("\"x\" is bound to a view"), "{}", last());
    assert!(y.iter().all(|&b| b == 0), "nothing ran");

    // The lease's handle freed while bound: the model keeps the buffer.
    ok(hexrpc_lease_free(frame_lease));
    let mut w = 0;
    // SAFETY: out pointer valid; the handle is dead.
    assert_eq!(unsafe { hexrpc_lease_writable(frame_lease, &mut w) }, hexrpc_status::HEXRPC_ERR_HANDLE);
    srv.write_frame(5).unwrap();
    run_sample(bound, None, &mut y, &mut z).unwrap_or_else(|st| panic!("{st:?}: {}", last()));
    assert!(y == plus(&frame(5, N), 3), "the binding outlives the lease's handle");
    // The server exits mid-stream: the bound input still reads the buffer's last frame.
    let status = srv.kill_mid_stream().unwrap();
    assert!(status.success(), "the server's exit: {status}");
    y.fill(0);
    run_sample(bound, None, &mut y, &mut z).unwrap_or_else(|st| panic!("{st:?}: {}", last()));
    assert!(y == plus(&frame(5, N), 3), "after the server exited");

    // Unbound: the input is copied in again, and data NULL is now a missing input.
    let mut was = u32::MAX;
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_model_unbind_input(bound, 0, &mut was) });
    assert_eq!((was, input_bound(bound, 0)), (1, 0));
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_model_unbind_input(bound, 0, &mut was) });
    assert_eq!(was, 0, "not bound any more");
    // SAFETY: `was_bound` may be NULL.
    ok(unsafe { hexrpc_model_unbind_input(bound, 0, null_mut()) });
    assert_eq!(run_sample(bound, None, &mut y, &mut z).err(), Some(hexrpc_status::HEXRPC_ERR_INVALID));
    assert!(last().contains("\"x\" needs 1000 bytes"), "{}", last());
    let x: Vec<u8> = (0..N).map(|i| (i * 5) as u8).collect();
    let r = run_sample(bound, Some(&x), &mut y, &mut z).unwrap();
    assert_eq!(r.input_bytes_copied, N as u32);
    assert!(y == plus(&x, 3) && z == plus(&x, 8), "unbound, the input's bytes are used");
    ok(hexrpc_model_close(bound));
    ok(hexrpc_model_close(copying));
    ok(hexrpc_session_close(session));
}

/// Descriptors that are not a dma-buf, or not open, and lengths the buffer does not have, are
/// refused by `hexrpc_session_import` with `HEXRPC_ERR_INVALID` and a message saying why; no
/// lease is given out, and the session works on.
#[test]
fn forged_descriptors_and_lengths_are_refused_by_hexrpc_session_import() {
    let session = bench_session();
    let refused = |fd: i32, len: usize, flags: u32, needle: &str| {
        let (st, lease) = import(session, fd, len, flags);
        assert_eq!(st, hexrpc_status::HEXRPC_ERR_INVALID, "fd {fd}, {len} bytes, flags {flags}: {}", last());
        assert!(lease.is_null(), "fd {fd}: no lease written on a refusal");
        assert!(last().contains(needle), "fd {fd}: {:?} does not say {needle:?}", last());
    };
    // A pipe: open, but not a dma-buf (either end).
    let mut p = [0i32; 2];
    // SAFETY: `p` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    for end in p {
        refused(end, 4096, HEXRPC_IMPORT_READ_ONLY, "import: refused before any FastRPC call: the descriptor is not a dma-buf");
        // SAFETY: F_GETFD reads the descriptor's flags only.
        assert_ne!(unsafe { libc::fcntl(end, libc::F_GETFD) }, -1, "the caller's pipe stays open");
    }
    // A regular file.
    let file = std::fs::File::open("/proc/self/exe").unwrap();
    refused(std::os::fd::AsRawFd::as_raw_fd(&file), 4096, HEXRPC_IMPORT_READ_WRITE, "the descriptor is not a dma-buf");
    // -1, and a number that was open and is closed: the highest number this process may have
    // (new descriptors take the lowest free number, so no other thread's open lands on it).
    refused(-1, 4096, HEXRPC_IMPORT_READ_ONLY, "import: refused before any FastRPC call: the descriptor is not open in this process");
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is valid for one write.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let top = i32::try_from(lim.rlim_cur.min(1 << 20) - 1).unwrap();
    // SAFETY: duplicates the pipe's read end onto the lowest free number from `top` (ours).
    let closed = unsafe { libc::fcntl(p[0], libc::F_DUPFD_CLOEXEC, top) };
    assert_eq!(closed, top, "{}", std::io::Error::last_os_error());
    // SAFETY: `closed` is ours, closed once.
    assert_eq!(unsafe { libc::close(closed) }, 0);
    refused(closed, 4096, HEXRPC_IMPORT_READ_ONLY, "the descriptor is not open in this process");
    // SAFETY: the pipe's descriptors are ours, closed once.
    unsafe {
        libc::close(p[0]);
        libc::close(p[1]);
    }
    // A real dma-buf, asked for more than it holds, or for nothing, or with unknown flags.
    let srv = frame_server();
    let fd = srv.fd().0;
    refused(
        fd,
        FRAME_LEN + 1,
        HEXRPC_IMPORT_READ_ONLY,
        &format!("{} bytes asked for, beyond the dma-buf's {FRAME_LEN} bytes", FRAME_LEN + 1),
    );
    refused(fd, usize::MAX, HEXRPC_IMPORT_READ_ONLY, "beyond the dma-buf's");
    refused(fd, 0, HEXRPC_IMPORT_READ_ONLY, "an import of 0 bytes");
    refused(fd, FRAME_LEN, 2, "import flags 0x2: use HEXRPC_IMPORT_READ_ONLY (0) or HEXRPC_IMPORT_READ_WRITE (1)");
    // Handle and pointer misuse.
    // SAFETY: a NULL out pointer is reported.
    assert_eq!(
        unsafe { hexrpc_session_import(session, fd, FRAME_LEN, HEXRPC_IMPORT_READ_ONLY, null_mut()) },
        hexrpc_status::HEXRPC_ERR_NULL
    );
    let mut lease = null_mut();
    // SAFETY: out pointer valid; the session handle is forged.
    let st = unsafe { hexrpc_session_import(0x1234 as *mut hexrpc_session, fd, FRAME_LEN, HEXRPC_IMPORT_READ_ONLY, &mut lease) };
    assert_eq!(st, hexrpc_status::HEXRPC_ERR_HANDLE);
    // SAFETY: out pointer may not be NULL for hexrpc_lease_writable: reported.
    assert_eq!(unsafe { hexrpc_lease_writable(null_mut(), null_mut()) }, hexrpc_status::HEXRPC_ERR_HANDLE);
    // After all that, the same descriptor imports, read-write: writable here, and what this
    // process writes through it is what a bound model input reads.
    let (st, rw) = import(session, fd, FRAME_LEN, HEXRPC_IMPORT_READ_WRITE);
    ok(st);
    assert_eq!(writable(rw), 1);
    let x: Vec<u8> = (0..N).map(|i| (i * 3 + 1) as u8).collect();
    write_shared(rw, 2048, &x);
    let m = sample_model(session, N);
    ok(hexrpc_model_bind_input(m, 0, rw, 2048));
    let (mut y, mut z) = (vec![0u8; N], vec![0u8; N]);
    let r = run_sample(m, None, &mut y, &mut z).unwrap_or_else(|st| panic!("{st:?}: {}", last()));
    assert_eq!(r.input_bytes_copied, 0);
    assert!(y == plus(&x, 3) && z == plus(&x, 8));
    ok(hexrpc_model_close(m));
    ok(hexrpc_lease_free(rw));
    srv.stop().unwrap();
    ok(hexrpc_session_close(session));
}

/// A binding the model cannot take is `HEXRPC_ERR_INVALID` naming why, and changes nothing: the
/// input is still copied in. Leases of the model's session bind, an arena's sub-allocation at its
/// offset in the arena too.
#[test]
fn bind_refusals_change_nothing_and_session_leases_bind() {
    let session = bench_session();
    let other = bench_session();
    let m = sample_model(session, N);
    let alloc = |s: *mut hexrpc_session| {
        let mut l = null_mut();
        // SAFETY: out pointer valid.
        ok(unsafe { hexrpc_lease_alloc(s, 8192, &mut l) });
        l
    };
    let (own, elsewhere) = (alloc(session), alloc(other));
    assert_eq!(writable(own), 1);
    let refused = |index: usize, lease: *mut hexrpc_lease, offset: usize, status: hexrpc_status, needle: &str| {
        assert_eq!(hexrpc_model_bind_input(m, index, lease, offset), status, "input {index} at {offset}: {}", last());
        assert!(last().contains(needle), "input {index} at {offset}: {:?} does not say {needle:?}", last());
        assert_eq!(input_bound(m, 0), 0, "a refusal changes nothing");
    };
    refused(1, own, 0, hexrpc_status::HEXRPC_ERR_INVALID, "model-bind: there is no input 1: the model has 1");
    refused(usize::MAX, own, 0, hexrpc_status::HEXRPC_ERR_INVALID, "there is no input");
    refused(0, own, 64, hexrpc_status::HEXRPC_ERR_INVALID, "the view's offset is 64 modulo 128");
    refused(0, own, 8192 - 896, hexrpc_status::HEXRPC_ERR_INVALID, "at offset 7296 does not fit the lease of 8192 bytes");
    refused(0, own, usize::MAX - 127, hexrpc_status::HEXRPC_ERR_INVALID, "does not fit the lease");
    refused(0, elsewhere, 0, hexrpc_status::HEXRPC_ERR_INVALID, "model-bind: the lease is of another session than the model's");
    refused(0, m.cast(), 0, hexrpc_status::HEXRPC_ERR_HANDLE, "not a live lease handle");
    refused(0, null_mut(), 0, hexrpc_status::HEXRPC_ERR_HANDLE, "not a live lease handle");
    assert_eq!(hexrpc_model_bind_input(null_mut(), 0, own, 0), hexrpc_status::HEXRPC_ERR_HANDLE);
    let (mut b, mut was) = (0u32, 0u32);
    // SAFETY: out pointers valid.
    assert_eq!(unsafe { hexrpc_model_input_bound(m, 1, &mut b) }, hexrpc_status::HEXRPC_ERR_INVALID);
    // SAFETY: out pointer valid.
    assert_eq!(unsafe { hexrpc_model_unbind_input(m, 1, &mut was) }, hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().contains("there is no input 1"), "{}", last());
    // SAFETY: a NULL out pointer is reported.
    assert_eq!(unsafe { hexrpc_model_input_bound(m, 0, null_mut()) }, hexrpc_status::HEXRPC_ERR_NULL);
    // Nothing changed: the input is copied in.
    let x: Vec<u8> = (0..N).map(|i| (i * 11) as u8).collect();
    let (mut y, mut z) = (vec![0u8; N], vec![0u8; N]);
    let r = run_sample(m, Some(&x), &mut y, &mut z).unwrap();
    assert_eq!(r.input_bytes_copied, N as u32);
    assert!(y == plus(&x, 3));
    // A lease of the session at an aligned offset binds; so does an arena's sub-allocation.
    write_shared(own, 128, &x);
    ok(hexrpc_model_bind_input(m, 0, own, 128));
    y.fill(0);
    let r = run_sample(m, None, &mut y, &mut z).unwrap();
    assert_eq!(r.input_bytes_copied, 0);
    assert!(y == plus(&x, 3) && z == plus(&x, 8), "read at offset 128 of the lease");
    let mut arena = null_mut();
    // SAFETY: out pointer valid.
    ok(unsafe { hexrpc_arena_new(session, 64 * 1024, &mut arena) });
    let (st, _first) = arena_alloc(arena, 4096, 0);
    ok(st);
    let (st, sub) = arena_alloc(arena, 2048, 0);
    ok(st);
    let x2 = plus(&x, 100);
    write_shared(sub, 0, &x2);
    // Rebinding replaces the binding; the sub-allocation is not at the arena's start.
    ok(hexrpc_model_bind_input(m, 0, sub, 0));
    refused_at_sub(m, sub);
    let r = run_sample(m, None, &mut y, &mut z).unwrap();
    assert_eq!(r.input_bytes_copied, 0);
    assert!(y == plus(&x2, 3), "read from the sub-allocation, not from the arena's start or the other lease");
    ok(hexrpc_model_close(m));
    ok(hexrpc_session_close(other));
    ok(hexrpc_session_close(session));
}

/// Past the end of a 2048-byte sub-allocation is refused even though its arena has room there.
fn refused_at_sub(m: *mut hexrpc_model, sub: *mut hexrpc_lease) {
    assert_eq!(hexrpc_model_bind_input(m, 0, sub, 1152), hexrpc_status::HEXRPC_ERR_INVALID);
    assert!(last().contains("does not fit the lease of 2048 bytes"), "{}", last());
    assert_eq!(input_bound(m, 0), 1, "the earlier binding stays");
}
