use std::io::Write as _;

use axum::http::HeaderValue;

use super::*;

const BODY: &[u8] = br#"{"model":"gpt-5.5","input":"hello"}"#;

/// `{"model":"gpt-5.5","input":"hello"}` as node's `zlib.brotliCompressSync` writes it.
const BROTLI_BODY: [u8; 39] = [
    11, 17, 128, 123, 34, 109, 111, 100, 101, 108, 34, 58, 34, 103, 112, 116, 45, 53, 46, 53, 34, 44, 34, 105, 110,
    112, 117, 116, 34, 58, 34, 104, 101, 108, 108, 111, 34, 125, 3,
];

/// 1 MiB of `a` as node's `zlib.brotliCompressSync` writes it: 14 bytes.
const BROTLI_MEBIBYTE: [u8; 14] = [91, 255, 255, 143, 95, 34, 44, 30, 11, 4, 114, 239, 31, 0];

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).expect("zstd")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

fn headers(values: &[&'static str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        h.append(header::CONTENT_ENCODING, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn the_header_names_one_coding_or_none() {
    let read = |values: &[&'static str]| coding(&headers(values)).map_err(|e| e.to_string());
    assert_eq!(read(&[]), Ok(None));
    assert_eq!(read(&["identity"]), Ok(None));
    assert_eq!(read(&["zstd"]), Ok(Some(Coding::Zstd)));
    assert_eq!(read(&["ZSTD"]), Ok(Some(Coding::Zstd)));
    assert_eq!(read(&["gzip"]), Ok(Some(Coding::Gzip)));
    assert_eq!(read(&["x-gzip"]), Ok(Some(Coding::Gzip)));
    assert_eq!(read(&[" br "]), Ok(Some(Coding::Brotli)));
    assert_eq!(read(&["identity, zstd"]), Ok(Some(Coding::Zstd)));
    assert_eq!(read(&["identity", "gzip"]), Ok(Some(Coding::Gzip)));
    for refused in [&["deflate"][..], &["compress"], &["gzip, zstd"], &["gzip", "br"], &["zstd;q=1"]] {
        let e = coding(&headers(refused)).expect_err("refused");
        assert!(matches!(e, EncodingError::Unsupported { .. }), "{refused:?}: {e:?}");
    }
    let long = HeaderValue::from_str(&"x".repeat(500)).expect("ascii");
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_ENCODING, long);
    match coding(&h).expect_err("refused") {
        EncodingError::Unsupported { coding } => {
            assert!(coding.len() < 100, "a long name is quoted cut short: {coding}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_coding_decodes_to_the_body_sent() {
    for (coding, sent) in
        [(Coding::Zstd, zstd(BODY)), (Coding::Gzip, gzip(BODY)), (Coding::Brotli, BROTLI_BODY.to_vec())]
    {
        let body = decode(coding, &sent[..], 1024).expect("decodes");
        assert_eq!(&body[..], BODY, "{coding:?}");
        // A body exactly at the cap is within it.
        assert!(decode(coding, &sent[..], BODY.len()).is_ok(), "{coding:?}");
    }
    // Several gzip members or zstd frames are one body, as HTTP allows.
    let twice = [gzip(b"{\"model\":"), gzip(b"\"m\"}")].concat();
    assert_eq!(&decode(Coding::Gzip, &twice[..], 1024).expect("members")[..], br#"{"model":"m"}"#);
    let twice = [zstd(b"{\"model\":"), zstd(b"\"m\"}")].concat();
    assert_eq!(&decode(Coding::Zstd, &twice[..], 1024).expect("frames")[..], br#"{"model":"m"}"#);
}

#[test]
fn what_is_not_what_its_header_says_is_a_bad_encoding() {
    let mut cut_zstd = zstd(BODY);
    cut_zstd.truncate(cut_zstd.len() - 3);
    let mut cut_gzip = gzip(BODY);
    cut_gzip.truncate(cut_gzip.len() - 3);
    let cases = [
        (Coding::Zstd, BODY.to_vec()),
        (Coding::Zstd, cut_zstd),
        (Coding::Zstd, [zstd(BODY), b"trailing".to_vec()].concat()),
        (Coding::Gzip, BODY.to_vec()),
        (Coding::Gzip, cut_gzip),
        (Coding::Brotli, vec![0xff; 32]),
        (Coding::Brotli, BROTLI_BODY[..20].to_vec()),
    ];
    for (coding, sent) in cases {
        match decode(coding, &sent[..], 1024) {
            Err(EncodingError::Malformed { coding: name, .. }) => assert_eq!(name, coding.name()),
            other => panic!("{coding:?} of {sent:?}: {other:?}"),
        }
    }
}

/// Input that counts how much of it a decoder took.
struct Counted<'a> {
    rest: &'a [u8],
    taken: usize,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.rest.read(buf)?;
        self.taken += n;
        Ok(n)
    }
}

impl BufRead for Counted<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        // At most 4 KiB at a time, so what was taken says how far decoding went.
        Ok(&self.rest[..self.rest.len().min(4096)])
    }

    fn consume(&mut self, n: usize) {
        self.rest = &self.rest[n..];
        self.taken += n;
    }
}

#[test]
fn decoding_stops_at_the_cap() {
    let limit = 64 * 1024;
    // A thousand frames (members, meta-blocks), each 1 MiB decoded: a gibibyte in a few kilobytes of
    // zstd and gzip, in 14 bytes of brotli for the first mebibyte.
    let mebibyte = vec![b'a'; 1 << 20];
    let bombs = [
        (Coding::Zstd, zstd(&mebibyte).repeat(1000)),
        (Coding::Gzip, gzip(&mebibyte).repeat(1000)),
        (Coding::Brotli, BROTLI_MEBIBYTE.to_vec()),
    ];
    for (coding, bomb) in bombs {
        let mut input = Counted { rest: &bomb, taken: 0 };
        match decode(coding, &mut input, limit) {
            Err(EncodingError::TooLarge { coding: name, limit: said }) => {
                assert_eq!((name, said), (coding.name(), limit));
            }
            other => panic!("{coding:?}: {other:?}"),
        }
        if coding != Coding::Brotli {
            let (taken, all) = (input.taken, bomb.len());
            assert!(taken * 10 < all, "{coding:?}: {taken} bytes of {all} read to decode 64 KiB");
        }
    }
}

#[tokio::test]
async fn a_body_without_content_encoding_is_handed_back_as_it_is() {
    let raw = Bytes::from_static(BODY);
    let same = decoded(&HeaderMap::new(), raw.clone(), 1024).await.expect("plain");
    assert_eq!(same.as_ptr(), raw.as_ptr(), "the same bytes, not a copy");
    let same = decoded(&headers(&["identity"]), raw.clone(), 1024).await.expect("identity");
    assert_eq!(same.as_ptr(), raw.as_ptr());
    let decoded = decoded(&headers(&["gzip"]), Bytes::from(gzip(BODY)), 1024).await.expect("gzip");
    assert_eq!(&decoded[..], BODY);
}
