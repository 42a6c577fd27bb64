//! Reading a file's lines backwards, newest first, for `audit query --last` and `tail`.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The complete lines of `file[..len]`, newest first, read backwards in blocks: memory is one
/// block plus the longest line, whatever the file's size. A torn last line is skipped.
pub(crate) struct ReverseLines {
    file: File,
    /// Bytes before this offset are still unread.
    unread: u64,
    /// Read but not yet returned: `pending[..]` ends at `unread + pending.len()`.
    pending: Vec<u8>,
    started: bool,
}

const BLOCK: usize = 64 * 1024;

impl ReverseLines {
    pub(crate) fn new(file: File, len: u64) -> ReverseLines {
        ReverseLines {
            file,
            unread: len,
            pending: Vec::new(),
            started: false,
        }
    }

    /// The next line back (without `\n`) and its offset.
    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<(u64, Vec<u8>)>> {
        if !self.started {
            self.started = true;
            // Drop a torn last line: everything after the last `\n`.
            loop {
                if let Some(i) = self.pending.iter().rposition(|&b| b == b'\n') {
                    self.pending.truncate(i + 1);
                    break;
                }
                if self.unread == 0 {
                    self.pending.clear();
                    return Ok(None);
                }
                self.pending.clear();
                self.read_block()?;
            }
        }
        // `pending` ends with the `\n` of the line to return (or is empty).
        loop {
            if self.pending.is_empty() && self.unread == 0 {
                return Ok(None);
            }
            let body_end = self.pending.len().saturating_sub(1);
            if let Some(i) = self.pending[..body_end].iter().rposition(|&b| b == b'\n') {
                let line = self.pending[i + 1..body_end].to_vec();
                self.pending.truncate(i + 1);
                return Ok(Some((self.unread + i as u64 + 1, line)));
            }
            if self.unread == 0 {
                let line = self.pending[..body_end].to_vec();
                self.pending.clear();
                return Ok(Some((0, line)));
            }
            self.read_block()?;
        }
    }

    /// Prepends the block before `unread` to `pending`.
    fn read_block(&mut self) -> std::io::Result<()> {
        let start = self.unread.saturating_sub(BLOCK as u64);
        let n = (self.unread - start) as usize;
        let mut block = vec![0; n + self.pending.len()];
        self.file.read_exact_at(&mut block[..n], start)?;
        block[n..].copy_from_slice(&self.pending);
        self.pending = block;
        self.unread = start;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reverse(content: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, content).unwrap();
        let mut lines = ReverseLines::new(File::open(&path).unwrap(), content.len() as u64);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push(line);
        }
        out
    }

    #[test]
    fn reverse_lines_match_forward_lines_across_block_edges() {
        for sizes in [
            vec![],
            vec![0],
            vec![5, 0, 7],
            vec![BLOCK - 1, 1, BLOCK, BLOCK + 1, 3],
            vec![3 * BLOCK + 17, 2],
        ] {
            for torn in [&b""[..], b"torn", &vec![b'x'; BLOCK + 3]] {
                let mut content = Vec::new();
                let mut expected = Vec::new();
                for (i, size) in sizes.iter().enumerate() {
                    let line = vec![b'a' + (i % 26) as u8; *size];
                    expected.push((content.len() as u64, line.clone()));
                    content.extend_from_slice(&line);
                    content.push(b'\n');
                }
                content.extend_from_slice(torn);
                expected.reverse();
                assert_eq!(reverse(&content), expected, "{sizes:?} torn {}", torn.len());
            }
        }
    }
}
