//! Unix socket clients that name the socket's path as the HTTP/2 `:authority`.
//!
//! gRPC clients built on grpc C-core 1.57 and later (Python, Ruby, C++, PHP), grpc-java and
//! grpc-swift send the socket path (`/run/w.sock`, or percent-encoded, `%2Frun%2Fw.sock`) as
//! the `:authority` of every request on a unix socket. That is not a valid authority, and the
//! HTTP/2 server under tonic (h2) resets such a stream with PROTOCOL_ERROR; upstream's Go server
//! takes it. grpc-go and tonic clients send `localhost` and are not affected.
//!
//! So on a unix socket each connection goes through [`normalize`]: the client's header blocks
//! are decoded (HPACK, keeping the client's dynamic table), an `:authority` that does not parse
//! as one is replaced by `localhost`, and the block is re-encoded as plain literals, which
//! leaves the server's HPACK table unused. Every other frame, and everything the server sends,
//! passes through unchanged. On a unix socket the authority means nothing anyway.

use std::io;
use std::panic::AssertUnwindSafe;

use fluke_hpack::Decoder;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::UnixStream;

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest frame we write: HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which every server
/// accepts.
const MAX_FRAME: usize = 16_384;
/// A header block larger than this is refused (the server's own limit is far lower).
const MAX_BLOCK: usize = 1 << 20;

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Serves `client` through the normalizing proxy; the server reads and writes the returned end.
pub(crate) fn normalize(client: UnixStream) -> DuplexStream {
    let (ours, server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(proxy(client, ours));
    server
}

async fn proxy(client: UnixStream, server: DuplexStream) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let requests = async {
        let result = forward_requests(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
        result
    };
    let responses = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    let (result, ()) = tokio::join!(requests, responses);
    if let Err(error) = result {
        crate::log::warn(format_args!(
            "closed a gRPC connection on the unix socket: {error}"
        ));
    }
}

/// A header block being gathered from HEADERS and CONTINUATION frames.
struct OpenBlock {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
}

async fn forward_requests(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
) -> io::Result<()> {
    let mut preface = [0u8; 24];
    match from.read_exact(&mut preface).await {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
        Err(error) => return Err(error),
    }
    to.write_all(&preface).await?;
    if &preface != PREFACE {
        // Not HTTP/2 with prior knowledge: the server will say so; nothing to normalize.
        tokio::io::copy(from, to).await?;
        return Ok(());
    }
    let mut decoder = Decoder::new();
    let mut open: Option<OpenBlock> = None;
    loop {
        let mut head = [0u8; 9];
        match from.read_exact(&mut head).await {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;

        if kind != HEADERS && kind != CONTINUATION {
            if open.is_some() {
                return Err(invalid("a frame interrupted a header block"));
            }
            to.write_all(&head).await?;
            let copied = tokio::io::copy(&mut from.take(len as u64), to).await?;
            if copied != len as u64 {
                return Ok(());
            }
            continue;
        }

        if len > MAX_BLOCK {
            return Err(invalid("a header frame larger than 1 MiB"));
        }
        let mut payload = vec![0u8; len];
        from.read_exact(&mut payload).await?;
        if kind == HEADERS {
            if open.is_some() {
                return Err(invalid("a header block started inside another"));
            }
            let fragment = headers_fragment(&payload, flags)?;
            open = Some(OpenBlock {
                stream,
                end_stream: flags & END_STREAM != 0,
                block: fragment,
            });
        } else {
            let Some(block) = open.as_mut().filter(|block| block.stream == stream) else {
                return Err(invalid("a CONTINUATION frame outside a header block"));
            };
            block.block.extend_from_slice(&payload);
        }
        if open
            .as_ref()
            .is_some_and(|block| block.block.len() > MAX_BLOCK)
        {
            return Err(invalid("a header block larger than 1 MiB"));
        }
        if flags & END_HEADERS != 0
            && let Some(block) = open.take()
        {
            let rewritten = rewrite_block(&mut decoder, &block.block)?;
            write_headers(to, block.stream, block.end_stream, &rewritten).await?;
        }
    }
}

/// The header block fragment of a HEADERS frame, without padding and priority.
fn headers_fragment(payload: &[u8], flags: u8) -> io::Result<Vec<u8>> {
    let mut fragment = payload;
    if flags & PADDED != 0 {
        let (&pad, rest) = fragment
            .split_first()
            .ok_or_else(|| invalid("empty padded frame"))?;
        let end = rest
            .len()
            .checked_sub(usize::from(pad))
            .ok_or_else(|| invalid("bad padding"))?;
        fragment = &rest[..end];
    }
    if flags & PRIORITY != 0 {
        fragment = fragment.get(5..).ok_or_else(|| invalid("short priority"))?;
    }
    Ok(fragment.to_vec())
}

/// Decodes a header block with the client's HPACK state and re-encodes it as literals, with an
/// invalid `:authority` replaced by `localhost`.
fn rewrite_block(decoder: &mut Decoder<'static>, block: &[u8]) -> io::Result<Vec<u8>> {
    // The decoder panics on a few malformed inputs (a truncated table size update): refuse them
    // like any other malformed block.
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| decoder.decode(block)))
        .map_err(|_| invalid("malformed header block"))?
        .map_err(|error| invalid(&format!("malformed header block: {error:?}")))?;
    let mut out = Vec::with_capacity(block.len() + 16);
    for (name, value) in &decoded {
        let value: &[u8] =
            if name == b":authority" && http::uri::Authority::try_from(value.as_slice()).is_err() {
                b"localhost"
            } else {
                value
            };
        // Literal header field without indexing, new name (RFC 7541, 6.2.2).
        out.push(0x00);
        encode_string(&mut out, name);
        encode_string(&mut out, value);
    }
    Ok(out)
}

/// A string literal without Huffman coding: its length (7-bit prefix), then its bytes.
fn encode_string(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut len = bytes.len();
    if len < 127 {
        out.push(len as u8);
    } else {
        out.push(127);
        len -= 127;
        while len >= 128 {
            out.push((len % 128) as u8 | 0x80);
            len /= 128;
        }
        out.push(len as u8);
    }
    out.extend_from_slice(bytes);
}

async fn write_headers(
    to: &mut (impl AsyncWrite + Unpin),
    stream: u32,
    end_stream: bool,
    block: &[u8],
) -> io::Result<()> {
    let mut chunks: Vec<&[u8]> = block.chunks(MAX_FRAME).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let (kind, mut flags) = if i == 0 {
            (HEADERS, 0)
        } else {
            (CONTINUATION, 0)
        };
        if i == 0 && end_stream {
            flags |= END_STREAM;
        }
        if i == last {
            flags |= END_HEADERS;
        }
        let len = chunk.len().to_be_bytes();
        let mut head = [0u8; 9];
        head[..3].copy_from_slice(&len[len.len() - 3..]);
        head[3] = kind;
        head[4] = flags;
        head[5..].copy_from_slice(&stream.to_be_bytes());
        to.write_all(&head).await?;
        to.write_all(chunk).await?;
    }
    Ok(())
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("HTTP/2: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluke_hpack::Encoder;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// (type, flags, stream) of each frame, and each decoded header block.
    type ReadBack = (Vec<(u8, u8, u32)>, Vec<Vec<(String, String)>>);

    /// Parses the frames `forward_requests` wrote and decodes their header blocks.
    fn read_back(mut bytes: &[u8]) -> ReadBack {
        assert_eq!(&bytes[..24], PREFACE);
        bytes = &bytes[24..];
        let mut decoder = Decoder::new();
        let (mut frames, mut blocks, mut block) = (Vec::new(), Vec::new(), Vec::new());
        while !bytes.is_empty() {
            let len = usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
            let (kind, flags) = (bytes[3], bytes[4]);
            let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
            frames.push((kind, flags, stream));
            if kind == HEADERS || kind == CONTINUATION {
                block.extend_from_slice(&bytes[9..9 + len]);
                if flags & END_HEADERS != 0 {
                    let decoded = decoder.decode(&block).unwrap();
                    blocks.push(
                        decoded
                            .into_iter()
                            .map(|(n, v)| {
                                (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap())
                            })
                            .collect(),
                    );
                    block.clear();
                }
            }
            bytes = &bytes[9 + len..];
        }
        (frames, blocks)
    }

    #[tokio::test]
    async fn rewrites_an_invalid_authority_and_passes_the_rest() {
        let mut encoder = Encoder::new();
        let request = |authority: &'static [u8]| {
            vec![
                (&b":method"[..], &b"POST"[..]),
                (b":scheme", b"http"),
                (
                    b":path",
                    b"/gitlab_com.gitlab_runner.runner_wrapper.ProcessWrapper/CheckStatus",
                ),
                (b":authority", authority),
                (b"content-type", b"application/grpc"),
            ]
        };
        // Two requests: the second one refers to the first one's entries in the dynamic table.
        let first = encoder.encode(request(b"%2Frun%2Fwrapper.sock"));
        let second = encoder.encode(request(b"%2Frun%2Fwrapper.sock"));
        let valid = encoder.encode(request(b"localhost:7777"));

        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
        // Padded and with a priority, split over a CONTINUATION.
        let mut padded = vec![2u8, 0, 0, 0, 0, 16];
        padded.extend_from_slice(&first[..10]);
        padded.extend_from_slice(&[0, 0]);
        input.extend(frame(HEADERS, PADDED | PRIORITY, 1, &padded));
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &first[10..]));
        input.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\0")); // DATA
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
        input.extend(frame(HEADERS, END_HEADERS, 5, &valid));

        let mut output = Vec::new();
        forward_requests(&mut input.as_slice(), &mut output)
            .await
            .unwrap();
        let (frames, blocks) = read_back(&output);
        assert_eq!(
            frames,
            [
                (0x4, 0, 0),
                (HEADERS, END_HEADERS, 1),
                (0x0, END_STREAM, 1),
                (HEADERS, END_HEADERS | END_STREAM, 3),
                (HEADERS, END_HEADERS, 5),
            ]
        );
        let authority = |block: &Vec<(String, String)>| {
            block
                .iter()
                .find(|(n, _)| n == ":authority")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(authority(&blocks[0]).as_deref(), Some("localhost"));
        assert_eq!(authority(&blocks[1]).as_deref(), Some("localhost"));
        assert_eq!(authority(&blocks[2]).as_deref(), Some("localhost:7777"));
        assert_eq!(
            blocks[1][2].1,
            "/gitlab_com.gitlab_runner.runner_wrapper.ProcessWrapper/CheckStatus"
        );
        assert_eq!(blocks[1].len(), 5);
    }

    #[tokio::test]
    async fn a_large_block_is_split_into_continuations() {
        let mut encoder = Encoder::new();
        let big = vec![b'x'; 40_000];
        let block = encoder.encode(vec![
            (&b":authority"[..], &b"/a.sock"[..]),
            (b"x-big", &big),
        ]);
        let mut input = PREFACE.to_vec();
        for (i, chunk) in block.chunks(MAX_FRAME).enumerate() {
            let last = (i + 1) * MAX_FRAME >= block.len();
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            input.extend(frame(kind, if last { END_HEADERS } else { 0 }, 1, chunk));
        }
        let mut output = Vec::new();
        forward_requests(&mut input.as_slice(), &mut output)
            .await
            .unwrap();
        let (frames, blocks) = read_back(&output);
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[2], (CONTINUATION, END_HEADERS, 1));
        assert_eq!(
            blocks[0][0],
            (":authority".to_owned(), "localhost".to_owned())
        );
        assert_eq!(blocks[0][1].1.len(), 40_000);
    }

    #[tokio::test]
    async fn malformed_input_is_an_error_not_a_panic() {
        for block in [
            &[0x3f][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff][..],
            &[0x40, 0x05][..],
        ] {
            let mut input = PREFACE.to_vec();
            input.extend(frame(HEADERS, END_HEADERS, 1, block));
            let result = forward_requests(&mut input.as_slice(), &mut Vec::new()).await;
            assert!(result.is_err(), "{block:?}");
        }
        let mut input = PREFACE.to_vec();
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
        assert!(
            forward_requests(&mut input.as_slice(), &mut Vec::new())
                .await
                .is_err()
        );
    }
}
