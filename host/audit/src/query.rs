//! Reading records back: oldest-first iteration and newest-first tails, with filters.
//!
//! Every query takes a [`Scope`] and there is no default: the gateway passes
//! `Scope::Tenant(<the caller's tenant>)`, which only ever matches records of that tenant
//! (gateway-wide records have no tenant and are never shown); only the admin CLI uses
//! `Scope::AllTenants`. Reading checks each line against its own hash but not the chain
//! (`verify` does); a last line still being written is skipped.
//!
//! Costs do not grow with the log: [`tail`] reads segments backwards from their end in blocks
//! and stops once it has enough; [`records`] streams one line at a time, skips whole segments
//! whose time range (from the segment's index, or its first and last lines) is outside
//! `since`/`until`, seeks to `since` inside a segment by binary search, and stops at `until`.
//! Both rely on `ts` never decreasing along the chain, which the writer guarantees and
//! `verify` checks. A compressed segment cannot be read backwards or seeked into: it is
//! skipped by its index like any other, and otherwise streamed forward (for `tail`, keeping
//! only the newest matches).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use hpcgate_policy_sdk::glob::Glob;

use super::canonical::{check_hash, check_line, peek_seq_ts};
use super::error::{AuditError, arc};
use super::index;
use super::record::{Event, Record};
use super::reverse::ReverseLines;
use super::segment::{self, Segment};
use super::verify::snapshot;
use crate::time::Timestamp;
use hpcgate_policy_sdk::outcome::DecisionKind;

/// Whose records a query may return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Only records whose tenant (and whose call's tenant) is this one.
    Tenant(String),
    /// Every record (admins only).
    AllTenants,
}

impl Scope {
    /// Whether a record of this scope's may be shown.
    pub fn allows(&self, record: &Record) -> bool {
        match self {
            Scope::AllTenants => true,
            Scope::Tenant(tenant) => {
                record.entry.tenant.as_deref() == Some(tenant.as_str())
                    && record
                        .entry
                        .call
                        .as_ref()
                        .is_none_or(|call| &call.tenant == tenant)
            }
        }
    }
}

/// Which records to return; every field set must match. `since` is inclusive, `until`
/// exclusive.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub instance: Option<String>,
    /// Glob over the exposed tool name (`submit_job`, `fs__*`).
    pub tool: Option<Glob>,
    pub decision: Option<DecisionKind>,
    pub event: Option<Event>,
    pub principal: Option<String>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
}

impl Filter {
    pub fn matches(&self, record: &Record) -> bool {
        let e = &record.entry;
        let eq = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        eq(&self.instance, &e.instance)
            && eq(&self.principal, &e.principal)
            && self
                .tool
                .as_ref()
                .is_none_or(|g| e.tool.as_deref().is_some_and(|t| g.matches(t)))
            && self
                .decision
                .is_none_or(|d| e.decision.as_ref().is_some_and(|f| f.decision == d))
            && self.event.is_none_or(|ev| e.event == ev)
            && self.since.is_none_or(|t| record.ts >= t)
            && self.until.is_none_or(|t| record.ts < t)
    }

    /// Whether only `since` and `until` are set.
    fn only_time(&self) -> bool {
        self.instance.is_none()
            && self.tool.is_none()
            && self.decision.is_none()
            && self.event.is_none()
            && self.principal.is_none()
    }

    /// Whether records with `ts` in `[first, last]` may match the time bounds.
    fn overlaps(&self, first: Timestamp, last: Timestamp) -> bool {
        self.since.is_none_or(|t| last >= t) && self.until.is_none_or(|t| first < t)
    }
}

/// The first and last `ts` of `segment[..len]`: from its index when the index is for this
/// length, else from the first and last lines of a plain segment. `None` when neither gives
/// one (read it all).
fn time_range(segment: &Segment, len: u64) -> Option<(Timestamp, Timestamp)> {
    if let Some(index) = index::read_for(segment, len) {
        return Some((index.first_ts, index.last_ts));
    }
    let file = open_plain(segment)?;
    let ((_, first), (_, last)) = index::range_of(&file, len).ok()??;
    Some((first, last))
}

/// A plain segment's file for reading at offsets; `None` when it is compressed (or was
/// compressed since it was listed, or cannot be opened: the stream that follows reports why).
fn open_plain(segment: &Segment) -> Option<File> {
    if segment.compressed {
        return None;
    }
    segment::open_read(&segment.path).ok()
}

/// The matching records, oldest first, streamed.
pub fn records(dir: &Path, scope: Scope, filter: Filter) -> Result<Records, AuditError> {
    let mut files = snapshot(dir)?;
    files.reverse();
    Ok(Records {
        files,
        current: None,
        scope,
        filter,
        done: false,
    })
}

/// The `limit` newest matching records, newest first. Reads only as much of the log, from its
/// end, as it takes to find them (or to pass `since`).
pub fn tail(
    dir: &Path,
    scope: &Scope,
    filter: &Filter,
    limit: usize,
) -> Result<Vec<Record>, AuditError> {
    let mut found = Vec::new();
    if limit == 0 {
        return Ok(found);
    }
    for (segment, len) in snapshot(dir)?.into_iter().rev() {
        if let Some((first, last)) = time_range(&segment, len) {
            if filter.since.is_some_and(|t| last < t) {
                return Ok(found);
            }
            if !filter.overlaps(first, last) {
                continue;
            }
        }
        let Some(file) = open_plain(&segment) else {
            let (newest, passed_since) =
                tail_forward(&segment, len, scope, filter, limit - found.len())?;
            found.extend(newest);
            if found.len() >= limit || passed_since {
                return Ok(found);
            }
            continue;
        };
        let mut lines = ReverseLines::new(file, len);
        while let Some((offset, line)) = lines.next_line().map_err(|e| read_error(&segment, e))? {
            if filter
                .since
                .is_some_and(|t| peek_seq_ts(&line).is_some_and(|(_, ts)| ts < t))
            {
                return Ok(found);
            }
            let record = parse(&segment, &line, || format!("the line at byte {offset}"))?;
            if scope.allows(&record) && filter.matches(&record) {
                found.push(record);
                if found.len() >= limit {
                    return Ok(found);
                }
            }
        }
    }
    Ok(found)
}

/// The newest `want` matching records of `segment[..len]`, newest first, and whether a record
/// before `since` was seen: read forward (a compressed segment cannot be read backwards),
/// keeping only the newest matches. With only time filters over all tenants, only the kept
/// lines are parsed.
fn tail_forward(
    segment: &Segment,
    len: u64,
    scope: &Scope,
    filter: &Filter,
    want: usize,
) -> Result<(Vec<Record>, bool), AuditError> {
    let raw = *scope == Scope::AllTenants && filter.only_time();
    let mut reader = BufReader::with_capacity(256 * 1024, segment::open_stream(segment, 0, len)?);
    let mut kept: VecDeque<(u64, Vec<u8>, Option<Record>)> = VecDeque::new();
    let (mut buf, mut number, mut passed_since) = (Vec::new(), 0u64, false);
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| read_error(segment, e))?;
        if n == 0 || buf.last() != Some(&b'\n') {
            break;
        }
        number += 1;
        let line = &buf[..n - 1];
        let ts = peek_seq_ts(line).map(|(_, ts)| ts);
        if filter.since.is_some_and(|t| ts.is_some_and(|ts| ts < t)) {
            passed_since = true;
            continue;
        }
        if filter.until.is_some_and(|t| ts.is_some_and(|ts| ts >= t)) {
            break;
        }
        let record = if raw {
            None
        } else {
            let record = parse(segment, line, || format!("line {number}"))?;
            if !(scope.allows(&record) && filter.matches(&record)) {
                continue;
            }
            Some(record)
        };
        if kept.len() == want {
            kept.pop_front();
        }
        kept.push_back((number, if raw { line.to_vec() } else { Vec::new() }, record));
    }
    let mut newest = Vec::with_capacity(kept.len());
    for (number, line, record) in kept.into_iter().rev() {
        let record = match record {
            Some(record) => record,
            None => parse(segment, &line, || format!("line {number}"))?,
        };
        if filter.matches(&record) {
            newest.push(record);
        }
    }
    Ok((newest, passed_since))
}

/// Iterator over matching records; an unreadable file or line ends it with an `Err`.
pub struct Records {
    /// Files still to read, newest first (popped from the end).
    files: Vec<(Segment, u64)>,
    current: Option<Lines>,
    scope: Scope,
    filter: Filter,
    /// `until` was passed: nothing later can match.
    done: bool,
}

/// A matching record (unless only its hash was checked) and its line.
type Matched = (Option<Record>, Vec<u8>);

/// The complete lines of one segment, read forward from an offset.
struct Lines {
    segment: Segment,
    reader: BufReader<Box<dyn Read + Send>>,
    /// 1-based number of the next line, when reading started at the top.
    line: Option<u64>,
    offset: u64,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("scope", &self.scope)
            .finish()
    }
}

impl Records {
    fn fail<T>(&mut self, error: AuditError) -> Option<Result<T, AuditError>> {
        self.files.clear();
        self.current = None;
        self.done = true;
        Some(Err(error))
    }

    /// Opens the next segment that may hold matches, positioned at `since`.
    fn open_next(&mut self) -> Result<Option<Lines>, AuditError> {
        while let Some((segment, len)) = self.files.pop() {
            let (mut start, mut stream) = (0, None);
            if let Some((first, last)) = time_range(&segment, len) {
                if self.filter.until.is_some_and(|t| first >= t) {
                    return Ok(None);
                }
                if !self.filter.overlaps(first, last) {
                    continue;
                }
                // A plain segment is entered at `since`, a compressed one at the frame where
                // `since` falls; the lines before `since` are passed over as they stream by.
                if let Some(since) = self.filter.since.filter(|&t| first < t) {
                    if let Some(file) = open_plain(&segment) {
                        start = index::seek_since(&file, len, since)
                            .map_err(|e| read_error(&segment, e))?;
                    } else if segment.compressed
                        && let Ok(file) = segment::open_read(&segment.path)
                        && let Some((at, plain)) = crate::compress::seek_since(&file, since)
                    {
                        start = plain;
                        stream = Some(segment::open_compressed_at(&segment, at)?);
                    }
                }
            }
            let stream = match stream {
                Some(stream) => stream,
                None => segment::open_stream(&segment, start, len)?,
            };
            return Ok(Some(Lines {
                segment,
                reader: BufReader::with_capacity(256 * 1024, stream),
                line: (start == 0).then_some(1),
                offset: start,
                buf: Vec::new(),
            }));
        }
        Ok(None)
    }
}

impl Records {
    /// The raw line (without `\n`) of the next matching record, checked against its hash:
    /// what `--json` prints. When only `since`/`until` filter and the scope is all tenants,
    /// the record is not parsed at all (its time is read from the line's start).
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, AuditError>> {
        let full = self.scope != Scope::AllTenants || !self.filter.only_time();
        self.advance(full).map(|r| r.map(|(_, line)| line))
    }

    fn advance(&mut self, full: bool) -> Option<Result<Matched, AuditError>> {
        while !self.done {
            let Some(lines) = &mut self.current else {
                match self.open_next() {
                    Ok(Some(lines)) => self.current = Some(lines),
                    Ok(None) => self.done = true,
                    Err(e) => return self.fail(e),
                }
                continue;
            };
            lines.buf.clear();
            let n = match lines.reader.read_until(b'\n', &mut lines.buf) {
                Ok(n) => n,
                Err(e) => {
                    let error = read_error(&lines.segment, e);
                    return self.fail(error);
                }
            };
            if n == 0 || lines.buf.last() != Some(&b'\n') {
                // The end, or a last line still being written.
                self.current = None;
                continue;
            }
            let at = match lines.line {
                Some(line) => format!("line {line}"),
                None => format!("the line at byte {}", lines.offset),
            };
            lines.line = lines.line.map(|l| l + 1);
            lines.offset += n as u64;
            let line = &lines.buf[..n - 1];
            let peeked = peek_seq_ts(line).map(|(_, ts)| ts);
            if let Some(until) = self.filter.until
                && peeked.is_some_and(|ts| ts >= until)
            {
                self.done = true;
                break;
            }
            if let Some(since) = self.filter.since
                && peeked.is_some_and(|ts| ts < since)
            {
                // Before `since` (a compressed segment is read from its start): not parsed.
                continue;
            }
            if !full && let Some(ts) = peeked {
                match check_hash(line) {
                    Ok(()) if self.filter.since.is_none_or(|t| ts >= t) => {
                        return Some(Ok((None, line.to_vec())));
                    }
                    Ok(()) => continue,
                    Err(problem) => {
                        let error = AuditError::Unreadable {
                            path: lines.segment.path.clone(),
                            at,
                            problem: problem.to_string(),
                        };
                        return self.fail(error);
                    }
                }
            }
            match parse(&lines.segment, line, || at) {
                Ok(r) if self.scope.allows(&r) && self.filter.matches(&r) => {
                    let line = line.to_vec();
                    return Some(Ok((Some(r), line)));
                }
                Ok(_) => {}
                Err(e) => return self.fail(e),
            }
        }
        None
    }
}

impl Iterator for Records {
    type Item = Result<Record, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.advance(true)
            .map(|r| r.map(|(record, _)| record.expect("parsed")))
    }
}

fn parse(
    segment: &Segment,
    line: &[u8],
    at: impl FnOnce() -> String,
) -> Result<Record, AuditError> {
    check_line(line).map_err(|problem| AuditError::Unreadable {
        path: segment.path.clone(),
        at: at(),
        problem: problem.to_string(),
    })
}

fn read_error(segment: &Segment, source: std::io::Error) -> AuditError {
    AuditError::Read {
        path: segment.path.clone(),
        source: arc(source),
    }
}

/// The complete lines of every segment of the log in `dir`, oldest first, as one stream (for
/// `hpcgate policy test --calls <dir>`): a snapshot taken now, each segment opened when the
/// one before it is done.
pub fn replay_reader(dir: &Path) -> Result<impl BufRead + Send + use<>, AuditError> {
    let mut files = snapshot(dir)?;
    if files.is_empty() {
        return Err(AuditError::Read {
            path: dir.to_owned(),
            source: arc(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no audit segments (`audit-NNNNNN.jsonl`) in this directory",
            )),
        });
    }
    files.reverse();
    Ok(BufReader::with_capacity(
        256 * 1024,
        Segments {
            files,
            current: None,
        },
    ))
}

/// Segments read one after another.
struct Segments {
    /// Still to read, newest first (popped from the end).
    files: Vec<(Segment, u64)>,
    current: Option<Box<dyn Read + Send>>,
}

impl Read for Segments {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(current) = &mut self.current {
                let n = current.read(buf)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                self.current = None;
            }
            let Some((segment, len)) = self.files.pop() else {
                return Ok(0);
            };
            let stream = segment::open_stream(&segment, 0, len).map_err(std::io::Error::other)?;
            self.current = Some(stream);
        }
    }
}
