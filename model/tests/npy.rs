//! The `.npy` reader and writer: numpy's own bytes read back, every dtype a model has round
//! trips, big-endian arrays are swapped, and what a model cannot take is refused with a message
//! that names it.

use hexrpc_model::npy::{read_npy, write_npy, NpyError};
use hexrpc_model::{DType, DTYPES};

/// The bytes `numpy.save` writes for `numpy.arange(6, dtype='<f4').reshape(2, 3)` (numpy 1.x and
/// 2.x: version 1.0, the header padded with spaces to end with '\n' at a multiple of 64).
fn numpy_f32_2x3() -> Vec<u8> {
    let mut header = String::from("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    for v in 0..6 {
        b.extend_from_slice(&(v as f32).to_le_bytes());
    }
    b
}

/// A file with `header` (unpadded) and `data`, version `v`.
fn npy_with(v: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0x93, b'N', b'U', b'M', b'P', b'Y', v, 0];
    if v == 1 {
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        b.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(data);
    b
}

#[test]
fn numpys_bytes_read_back_and_are_what_the_writer_writes() {
    let file = numpy_f32_2x3();
    let a = read_npy(&file).unwrap();
    assert_eq!((a.dtype, a.shape.clone()), (DType::F32, vec![2, 3]));
    assert_eq!(a.data.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(write_npy(a.dtype, &a.shape, &a.data), file, "the writer writes numpy's bytes");
    assert_eq!((file.len() - 24) % 64, 0, "the header ends on a multiple of 64");
}

#[test]
fn every_dtype_and_shape_round_trips() {
    for dtype in DTYPES {
        for shape in [vec![], vec![5], vec![1, 3, 4], vec![2, 0, 3]] {
            let n: u64 = shape.iter().product();
            let data: Vec<u8> = (0..n as usize * dtype.size()).map(|i| (i * 7) as u8).collect();
            let file = write_npy(dtype, &shape, &data);
            let a = read_npy(&file).unwrap_or_else(|e| panic!("{dtype} {shape:?}: {e}"));
            assert_eq!((a.dtype, a.shape, a.data), (dtype, shape.clone(), data), "{dtype} {shape:?}");
        }
    }
    // A scalar's and a 1-D array's tuples as numpy writes them.
    assert!(String::from_utf8_lossy(&write_npy(DType::U8, &[], &[1])).contains("'shape': (), "));
    assert!(String::from_utf8_lossy(&write_npy(DType::U8, &[3], &[1, 2, 3])).contains("'shape': (3,), "));
}

#[test]
fn big_endian_arrays_are_swapped_and_versions_2_and_3_are_read() {
    let data: Vec<u8> = [1u16, 0x0203].iter().flat_map(|v| v.to_be_bytes()).collect();
    let a = read_npy(&npy_with(1, "{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }\n", &data)).unwrap();
    assert_eq!((a.dtype, a.data), (DType::U16, vec![1, 0, 3, 2]));
    for v in [2, 3] {
        let a = read_npy(&npy_with(v, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }\n", &[7, 8])).unwrap();
        assert_eq!((a.dtype, a.data), (DType::U8, vec![7, 8]));
    }
    // Keys in another order, as older numpy versions wrote them.
    let a = read_npy(&npy_with(1, "{'shape': (1,), 'fortran_order': False, 'descr': '<i4'}\n", &[1, 0, 0, 0])).unwrap();
    assert_eq!((a.dtype, a.shape), (DType::I32, vec![1]));
}

#[test]
fn what_a_model_cannot_take_is_refused_by_name() {
    let refused = |header: &str, data: &[u8]| read_npy(&npy_with(1, header, data)).unwrap_err();
    let e = refused("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", &[0; 8]);
    assert_eq!(e, NpyError::Dtype("<c8".into()));
    assert!(e.to_string().contains("'<c8' is not one a model takes") && e.to_string().contains("float32"), "{e}");
    assert_eq!(refused("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", &[0; 8]), NpyError::Dtype("|O".into()));
    assert_eq!(refused("{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }", &[0; 12]), NpyError::Dtype("<U3".into()));
    assert_eq!(refused("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", &[0; 4]), NpyError::FortranOrder);
    assert_eq!(refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", &[0; 4]), NpyError::Length { have: 4, want: Some(8) });
    let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
    assert_eq!(refused(huge, &[]), NpyError::Length { have: 0, want: None });
    assert!(matches!(refused("{'descr': '<f4', 'shape': (2,), }", &[0; 8]), NpyError::Header(_)));
    assert!(matches!(refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", &[0; 8]), NpyError::Header(_)));
    assert!(matches!(refused("['not', 'a', 'dict']", &[]), NpyError::Header(_)));
    assert_eq!(read_npy(b"PK\x03\x04 a zip (an .npz?)").unwrap_err(), NpyError::NotNpy);
    assert_eq!(read_npy(&npy_with(4, "{}", &[])).unwrap_err(), NpyError::Version(4, 0));
    let file = numpy_f32_2x3();
    for n in 0..file.len() {
        assert!(read_npy(&file[..n]).is_err(), "cut at {n}");
    }
}
