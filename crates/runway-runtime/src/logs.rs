//! An instance's output: stdout and stderr lines with timestamps, written to size-bounded
//! rotating files that can be read while the instance runs.
//!
//! Each line is in the CRI log format that Kubernetes nodes write and log shippers read:
//! `2026-11-21T12:00:00.123456789Z stdout F the line`, where `F` marks a full line and `P` a part
//! of a line longer than [`MAX_LINE`] (the rest follows on the next lines).

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader as AsyncBufReader};
use tokio::sync::mpsc;

use crate::spec::LogLimits;

/// The current log file's name in an instance's directory; rotated files add `.1`, `.2`, ….
pub const LOG_FILE: &str = "output.log";
/// Longer lines are split into parts of this many bytes.
pub const MAX_LINE: usize = 16 * 1024;
/// What one read of an instance's pipe takes at most: a Linux pipe's default capacity.
const READ: usize = 64 * 1024;
/// How long a pump rests after dropping a read over the rate.
const DROP_PAUSE: Duration = Duration::from_millis(100);

/// Which pipe a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// A line of output, or a part of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub stream: Stream,
    pub text: Vec<u8>,
    /// The line goes on in the next chunk.
    pub partial: bool,
}

/// How long a writer that met an error drops output before it tries the disk again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Formatted lines are written in batches of about this many bytes, and whenever the writer
/// has nothing more to write for now ([`LogWriter::flush`]).
const BATCH: usize = 64 * 1024;

/// Output that was not written: read from the instance and thrown away because the disk
/// refused it or the instance printed faster than its [`LogLimits::bytes_per_second`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Bytes dropped, since the instance's supervisor started.
    pub bytes: u64,
    /// Why, the last time some was dropped: the disk's error, or the rate limit.
    pub reason: String,
    /// Whether output is being dropped now (the disk still refuses it).
    pub ongoing: bool,
}

impl Dropped {
    /// For people: `56789 bytes of output were dropped: No space left on device (os error 28)`.
    pub fn describe(&self) -> String {
        format!(
            "{} bytes of output were dropped{}: {}",
            self.bytes,
            if self.ongoing { ", and still are" } else { "" },
            self.reason
        )
    }
}

/// Writes chunks to `output.log`, rotating it when it would grow past the limit. It never
/// fails and never blocks on a refusal: what the disk will not take (it is full, say) is
/// dropped and counted in [`LogWriter::dropped`], the file is cut back to its last whole line,
/// and writing resumes once the disk takes it again.
#[derive(Debug)]
pub struct LogWriter {
    dir: PathBuf,
    limits: LogLimits,
    /// The current file; none while it cannot be opened again after a rotation.
    file: Option<File>,
    /// Its length, up to its last whole line.
    size: u64,
    /// Formatted lines not written yet.
    batch: Vec<u8>,
    dropped: Dropped,
    /// After an error, nothing is tried before this.
    retry_at: Option<Instant>,
}

impl LogWriter {
    pub fn open(dir: &Path, limits: LogLimits) -> io::Result<Self> {
        let path = dir.join(LOG_FILE);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            dir: dir.to_owned(),
            limits,
            file: Some(file),
            size,
            batch: Vec::with_capacity(BATCH),
            dropped: Dropped::default(),
            retry_at: None,
        })
    }

    /// What was dropped so far; none when nothing was.
    pub fn dropped(&self) -> Option<&Dropped> {
        (self.dropped.bytes > 0).then_some(&self.dropped)
    }

    /// Counts output that was never handed to the writer (the rate limit dropped it).
    pub fn count_dropped(&mut self, bytes: u64, reason: &str) {
        self.dropped.bytes += bytes;
        reason.clone_into(&mut self.dropped.reason);
    }

    /// Adds a line to the batch; it is written by [`LogWriter::flush`], or here once the batch
    /// is full or would take the file past its size.
    pub fn write(&mut self, chunk: &Chunk, at: SystemTime) {
        let head = format!(
            "{} {} {} ",
            humantime::format_rfc3339_nanos(at),
            chunk.stream.as_str(),
            if chunk.partial { 'P' } else { 'F' }
        );
        let len = (head.len() + chunk.text.len() + 1) as u64;
        let pending = self.size + self.batch.len() as u64;
        if pending > 0 && pending + len > self.limits.max_file_bytes {
            self.flush();
            if self.retry_at.is_none()
                && let Err(error) = self.rotate()
            {
                self.refused(&error);
            }
        }
        self.batch.extend_from_slice(head.as_bytes());
        self.batch.extend_from_slice(&chunk.text);
        self.batch.push(b'\n');
        if self.batch.len() >= BATCH {
            self.flush();
        }
    }

    /// Writes the batch, or drops it while the disk refuses writes.
    pub fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            self.drop_batch();
            return;
        }
        match self.write_batch() {
            Ok(()) => {
                self.size += self.batch.len() as u64;
                self.batch.clear();
                if self.retry_at.take().is_some() {
                    self.dropped.ongoing = false;
                }
            }
            Err(error) => {
                self.refused(&error);
                self.drop_batch();
            }
        }
    }

    fn write_batch(&mut self) -> io::Result<()> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join(LOG_FILE))?;
            self.size = file.metadata()?.len();
            self.file = Some(file);
        }
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        file.write_all(&self.batch).inspect_err(|_| {
            // A part of the batch may be there: cut the file back to its last whole line (which
            // frees what the part took).
            let _ = file.set_len(self.size);
        })
    }

    fn refused(&mut self, error: &io::Error) {
        self.retry_at = Some(Instant::now() + RETRY_AFTER);
        self.dropped.reason = error.to_string();
        self.dropped.ongoing = true;
    }

    fn drop_batch(&mut self) {
        self.dropped.bytes += self.batch.len() as u64;
        self.batch.clear();
    }

    /// Renames `output.log` to `output.log.1` (and so on, up to the limit) and opens a new one.
    /// A failure part way leaves no file open: the next write opens `output.log` again.
    fn rotate(&mut self) -> io::Result<()> {
        let base = self.dir.join(LOG_FILE);
        let numbered = |n: u32| self.dir.join(format!("{LOG_FILE}.{n}"));
        self.file = None;
        self.size = 0;
        if self.limits.max_files == 0 {
            match fs::remove_file(&base) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        } else {
            for n in (1..self.limits.max_files).rev() {
                match fs::rename(numbered(n), numbered(n + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            match fs::rename(&base, numbered(1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        self.file = Some(OpenOptions::new().create(true).append(true).open(&base)?);
        Ok(())
    }
}

/// A token bucket over the bytes an instance prints, shared by its stdout and stderr pumps
/// ([`LogLimits::bytes_per_second`], [`LogLimits::burst_bytes`]).
#[derive(Debug)]
pub struct Rate {
    per_second: f64,
    burst: f64,
    state: std::sync::Mutex<(f64, Instant)>,
}

impl Rate {
    pub fn new(limits: &LogLimits) -> Self {
        // At least one read's worth, or no read would ever fit.
        let burst = limits.burst_bytes.max(READ as u64) as f64;
        Self {
            per_second: limits.bytes_per_second as f64,
            burst,
            state: std::sync::Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes `bytes` from the bucket: false when they do not fit (they are dropped).
    fn take(&self, bytes: usize) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, at) = &mut *state;
        let now = Instant::now();
        *tokens =
            (*tokens + now.duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        *at = now;
        if *tokens >= bytes as f64 {
            *tokens -= bytes as f64;
            true
        } else {
            false
        }
    }
}

/// What a pump sends: a line, or output it read and dropped over the rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Chunk(Chunk),
    Dropped { bytes: u64 },
}

/// Reads a pipe into chunks of at most [`MAX_LINE`] bytes, sending each to `sink`, until the
/// pipe closes or the receiver is gone. What goes past `rate` is read and dropped whole
/// (counted, never parsed), then the pump rests ([`DROP_PAUSE`]): an instance printing past its
/// rate waits on its full pipe at most that long, and its flood costs the host a read per pause.
/// Reads take up to a pipe's worth ([`READ`]) at once.
pub async fn pump<T: From<Output>>(
    pipe: impl AsyncRead + Unpin,
    stream: Stream,
    rate: Arc<Rate>,
    sink: mpsc::Sender<T>,
) {
    let mut reader = AsyncBufReader::with_capacity(READ, pipe);
    let mut pending = Vec::new();
    // What is left of the bytes read last, which the rate was charged for: the reader reads
    // again only once they are all consumed.
    let mut charged = 0;
    loop {
        let buffer = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buffer) => buffer,
        };
        if charged == 0 && rate.take(buffer.len()) {
            charged = buffer.len();
        } else if charged == 0 {
            let len = buffer.len();
            reader.consume(len);
            // A line begun before is cut: it ends where the drop begins.
            if !pending.is_empty() {
                let text = std::mem::take(&mut pending);
                let chunk = Chunk {
                    stream,
                    text,
                    partial: true,
                };
                if sink.send(Output::Chunk(chunk).into()).await.is_err() {
                    return;
                }
            }
            let dropped = Output::Dropped { bytes: len as u64 };
            if sink.send(dropped.into()).await.is_err() {
                return;
            }
            // The pipe fills meanwhile and the instance waits on it: a flood costs this
            // process a read every pause, not a read for every write the instance makes.
            tokio::time::sleep(DROP_PAUSE).await;
            continue;
        }
        let room = MAX_LINE - pending.len();
        let (take, chunk_done, partial) = match buffer.iter().take(room).position(|&b| b == b'\n') {
            Some(newline) => (newline + 1, true, false),
            None if buffer.len() >= room => (room, true, true),
            None => (buffer.len(), false, false),
        };
        pending.extend_from_slice(&buffer[..take]);
        reader.consume(take);
        charged -= take;
        if chunk_done {
            if !partial {
                pending.pop();
            }
            let text = std::mem::take(&mut pending);
            let chunk = Chunk {
                stream,
                text,
                partial,
            };
            if sink.send(Output::Chunk(chunk).into()).await.is_err() {
                return;
            }
        }
    }
    if !pending.is_empty() {
        let chunk = Chunk {
            stream,
            text: pending,
            partial: false,
        };
        let _ = sink.send(Output::Chunk(chunk).into()).await;
    }
}

/// One line read back from an instance's log files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// RFC 3339 with nanoseconds, UTC.
    pub time: String,
    pub stream: Stream,
    pub partial: bool,
    pub text: String,
}

impl LogLine {
    fn parse(line: &str) -> Option<Self> {
        let mut parts = line.splitn(4, ' ');
        let time = parts.next()?.to_owned();
        let stream = match parts.next()? {
            "stdout" => Stream::Stdout,
            "stderr" => Stream::Stderr,
            _ => return None,
        };
        let partial = parts.next()? == "P";
        let text = parts.next().unwrap_or_default().to_owned();
        Some(Self {
            time,
            stream,
            partial,
            text,
        })
    }
}

/// The last `n` lines of an instance's output, oldest first, across rotated files.
pub fn tail(dir: &Path, n: usize) -> io::Result<Vec<LogLine>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for index in 1.. {
        let path = dir.join(format!("{LOG_FILE}.{index}"));
        if !path.exists() {
            break;
        }
        files.push(path);
    }
    files.reverse();
    files.push(dir.join(LOG_FILE));
    let mut lines = VecDeque::with_capacity(n.min(4096));
    for path in files {
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in BufReader::new(file).split(b'\n') {
            let line = line?;
            if let Some(parsed) = LogLine::parse(&String::from_utf8_lossy(&line)) {
                if lines.len() == n {
                    lines.pop_front();
                }
                if n > 0 {
                    lines.push_back(parsed);
                }
            }
        }
    }
    Ok(lines.into())
}

/// Reads the lines added to an instance's current log file since the last call, for
/// `logs --follow`. A rotation is noticed by the file getting shorter than what was read.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl Follower {
    /// Starts at the end of what is there now.
    pub fn from_end(dir: &Path) -> Self {
        let path = dir.join(LOG_FILE);
        let offset = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Self {
            path,
            offset,
            partial: Vec::new(),
        }
    }

    /// Starts at the beginning, for an instance whose output is all new to the reader.
    pub fn from_start(dir: &Path) -> Self {
        Self {
            path: dir.join(LOG_FILE),
            offset: 0,
            partial: Vec::new(),
        }
    }

    pub fn poll(&mut self) -> io::Result<Vec<LogLine>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        if file.metadata()?.len() < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut added = Vec::new();
        self.offset += file.read_to_end(&mut added)? as u64;
        self.partial.extend_from_slice(&added);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Ok(Vec::new());
        };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        Ok(complete
            .split(|&b| b == b'\n')
            .filter_map(|line| LogLine::parse(&String::from_utf8_lossy(line)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> Chunk {
        Chunk {
            stream: Stream::Stdout,
            text: text.as_bytes().to_vec(),
            partial: false,
        }
    }

    #[test]
    fn rotates_and_keeps_the_newest_lines() {
        let dir = tempfile::tempdir().unwrap();
        let limits = LogLimits {
            max_file_bytes: 200,
            max_files: 2,
            ..LogLimits::default()
        };
        let mut writer = LogWriter::open(dir.path(), limits).unwrap();
        for i in 0..40 {
            writer.write(&chunk(&format!("line {i}")), SystemTime::now());
        }
        writer.flush();
        assert_eq!(writer.dropped(), None);
        for entry in fs::read_dir(dir.path()).unwrap() {
            let len = entry.unwrap().metadata().unwrap().len();
            assert!(len <= 200, "a log file grew to {len} bytes");
        }
        assert!(!dir.path().join("output.log.3").exists());
        let lines = tail(dir.path(), 3).unwrap();
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["line 37", "line 38", "line 39"]);
        assert!(lines[0].time.ends_with('Z'), "{}", lines[0].time);
    }

    #[tokio::test]
    async fn pump_splits_lines_and_long_lines() {
        let long = "x".repeat(MAX_LINE + 10);
        let input = format!("one\n\ntwo\n{long}\nlast without newline");
        let (tx, mut rx) = mpsc::channel::<Output>(16);
        let rate = Arc::new(Rate::new(&LogLimits::default()));
        pump(input.as_bytes(), Stream::Stderr, rate, tx).await;
        let mut got = Vec::new();
        while let Some(output) = rx.recv().await {
            let Output::Chunk(chunk) = output else {
                panic!("dropped under the rate: {output:?}");
            };
            got.push((String::from_utf8(chunk.text).unwrap(), chunk.partial));
        }
        let expected = vec![
            ("one".to_owned(), false),
            (String::new(), false),
            ("two".to_owned(), false),
            ("x".repeat(MAX_LINE), true),
            ("x".repeat(10), false),
            ("last without newline".to_owned(), false),
        ];
        assert_eq!(got, expected);
    }

    /// Output past the rate is read and dropped, counted in lines and bytes; what fits is kept.
    #[tokio::test]
    async fn pump_drops_what_goes_past_the_rate() {
        let limits = LogLimits {
            bytes_per_second: 1,
            burst_bytes: 0,
            ..LogLimits::default()
        };
        let line = format!("{}\n", "y".repeat(99));
        let input = line.repeat(1_000);
        let (tx, mut rx) = mpsc::channel::<Output>(1024);
        pump(
            input.as_bytes(),
            Stream::Stdout,
            Arc::new(Rate::new(&limits)),
            tx,
        )
        .await;
        let (mut kept, mut dropped_bytes) = (0u64, 0u64);
        while let Some(output) = rx.recv().await {
            match output {
                Output::Chunk(chunk) => kept += chunk.text.len() as u64 + u64::from(!chunk.partial),
                Output::Dropped { bytes } => dropped_bytes += bytes,
            }
        }
        // The burst is one read's worth, taken by the first read: the rest is dropped.
        assert!(kept <= READ as u64, "kept {kept} bytes");
        assert_eq!(kept + dropped_bytes, input.len() as u64);
    }
}
