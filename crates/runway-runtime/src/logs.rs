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
use std::time::SystemTime;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader as AsyncBufReader};
use tokio::sync::mpsc;

use crate::spec::LogLimits;

/// The current log file's name in an instance's directory; rotated files add `.1`, `.2`, ….
pub const LOG_FILE: &str = "output.log";
/// Longer lines are split into parts of this many bytes.
pub const MAX_LINE: usize = 16 * 1024;

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

/// Writes chunks to `output.log`, rotating it when it would grow past the limit.
#[derive(Debug)]
pub struct LogWriter {
    dir: PathBuf,
    limits: LogLimits,
    file: File,
    size: u64,
}

impl LogWriter {
    pub fn open(dir: &Path, limits: LogLimits) -> io::Result<Self> {
        let path = dir.join(LOG_FILE);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            dir: dir.to_owned(),
            limits,
            file,
            size,
        })
    }

    pub fn write(&mut self, chunk: &Chunk, at: SystemTime) -> io::Result<()> {
        let mut line = format!(
            "{} {} {} ",
            humantime::format_rfc3339_nanos(at),
            chunk.stream.as_str(),
            if chunk.partial { 'P' } else { 'F' }
        )
        .into_bytes();
        line.extend_from_slice(&chunk.text);
        line.push(b'\n');
        let len = line.len() as u64;
        if self.size > 0 && self.size + len > self.limits.max_file_bytes {
            self.rotate()?;
        }
        self.file.write_all(&line)?;
        self.size += len;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        let base = self.dir.join(LOG_FILE);
        let numbered = |n: u32| self.dir.join(format!("{LOG_FILE}.{n}"));
        if self.limits.max_files == 0 {
            fs::remove_file(&base)?;
        } else {
            for n in (1..self.limits.max_files).rev() {
                match fs::rename(numbered(n), numbered(n + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            fs::rename(&base, numbered(1))?;
        }
        self.file = OpenOptions::new().create(true).append(true).open(&base)?;
        self.size = 0;
        Ok(())
    }
}

/// Reads a pipe into chunks of at most [`MAX_LINE`] bytes, sending each to `sink`, until the
/// pipe closes or the receiver is gone.
pub async fn pump<T: From<Chunk>>(
    pipe: impl AsyncRead + Unpin,
    stream: Stream,
    sink: mpsc::Sender<T>,
) {
    let mut reader = AsyncBufReader::with_capacity(MAX_LINE, pipe);
    let mut pending = Vec::new();
    loop {
        let buffer = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buffer) => buffer,
        };
        let room = MAX_LINE - pending.len();
        let (take, chunk_done, partial) = match buffer.iter().take(room).position(|&b| b == b'\n') {
            Some(newline) => (newline + 1, true, false),
            None if buffer.len() >= room => (room, true, true),
            None => (buffer.len(), false, false),
        };
        pending.extend_from_slice(&buffer[..take]);
        reader.consume(take);
        if chunk_done {
            if !partial {
                pending.pop();
            }
            let text = std::mem::take(&mut pending);
            if sink
                .send(
                    Chunk {
                        stream,
                        text,
                        partial,
                    }
                    .into(),
                )
                .await
                .is_err()
            {
                return;
            }
        }
    }
    if !pending.is_empty() {
        let _ = sink
            .send(
                Chunk {
                    stream,
                    text: pending,
                    partial: false,
                }
                .into(),
            )
            .await;
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
        };
        let mut writer = LogWriter::open(dir.path(), limits).unwrap();
        for i in 0..40 {
            writer
                .write(&chunk(&format!("line {i}")), SystemTime::now())
                .unwrap();
        }
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
        let (tx, mut rx) = mpsc::channel::<Chunk>(16);
        pump(input.as_bytes(), Stream::Stderr, tx).await;
        let mut got = Vec::new();
        while let Some(chunk) = rx.recv().await {
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
}
