//! Globs over sandbox-view paths and tool names, with the semantics the README documents.
//!
//! | syntax | matches |
//! |---|---|
//! | `*` | any characters except `/` (so, any characters of a tool name) |
//! | `**` | any characters, `/` included |
//! | `**/` at the start or after `/` | nothing, or anything ending in `/`: `**/.ssh/**` matches `/.ssh/x` and `.ssh/x`, and `a/**/b` matches `a/b` |
//! | `/**` at the end | nothing, or `/` and anything: `/data/**` matches `/data/x/y` **and `/data` itself** |
//! | `?` | exactly one character other than `/` |
//! | `\c` | the character `c` literally (`\*`, `\?`, `\\`) |
//! | anything else | itself; matching is case-sensitive and there are no `[...]` classes |
//!
//! Why a trailing `/**` also covers the directory itself: the stock policies use globs as deny
//! lists, and a rule like `deny_read = ["**/.ssh/**"]` must also stop `move_path` of the `.ssh`
//! directory to a name the rule does not cover. Three or more stars in a row behave as `**`.
//!
//! A glob is compiled once ([`Glob::new`]) into a small NFA and matched by simulating all its
//! states at once, so matching is `O(pattern × text)` whatever the pattern: hostile patterns such
//! as `a*a*a*a*…b` cannot cause exponential backtracking.

use std::fmt;

use serde::{Deserialize, Deserializer};

/// Why a pattern is not a valid glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobError {
    /// The pattern is the empty string, which would only match an empty name.
    Empty,
    /// The pattern ends in a lone `\`, which escapes nothing.
    TrailingBackslash { pattern: String },
}

impl fmt::Display for GlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GlobError::Empty => f.write_str("a glob is empty; use `*` to match every name"),
            GlobError::TrailingBackslash { pattern } => write!(
                f,
                "glob `{pattern}` ends in a lone `\\`; write `\\\\` for a literal backslash"
            ),
        }
    }
}

impl std::error::Error for GlobError {}

/// What one NFA transition consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Char(char),
    NotSlash,
    Any,
}

impl Class {
    fn accepts(self, c: char) -> bool {
        match self {
            Class::Char(want) => c == want,
            Class::NotSlash => c != '/',
            Class::Any => true,
        }
    }
}

/// One NFA state: transitions that consume a character, and ε-moves that do not.
#[derive(Debug, Clone, Default)]
struct State {
    on: Vec<(Class, usize)>,
    eps: Vec<usize>,
}

/// The syntax elements of a pattern, before they become NFA states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Char(char),
    One,
    Star,
    /// `**` anywhere a more specific form does not apply.
    Globstar,
    /// `**/` at the start or after `/`: empty, or any text ending in `/`.
    GlobstarDir,
    /// `/**` at the end: empty, or `/` followed by any text.
    SlashGlobstarEnd,
}

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    states: Vec<State>,
    /// Literal text every match starts with, and the longest literal run every match contains:
    /// most texts are rejected by these two checks without running the NFA.
    prefix: String,
    required: String,
    /// A pattern the NFA need not run for: most scopes and tool lists are `*` or a plain name.
    shape: Shape,
}

/// Patterns matched without the NFA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// No wildcard: the text equals the pattern (its `prefix`).
    Literal,
    /// `*`: any text without a `/`.
    AnyName,
    /// `**`: any text.
    Anything,
    Nfa,
}

/// Two globs are equal when their patterns are: they then match the same names.
impl PartialEq for Glob {
    fn eq(&self, other: &Glob) -> bool {
        self.pattern == other.pattern
    }
}

impl Eq for Glob {}

impl Glob {
    /// Compiles `pattern`; see the module docs for the syntax.
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        if pattern.is_empty() {
            return Err(GlobError::Empty);
        }
        let tokens = tokenize(pattern)?;
        let runs = literal_runs(&tokens);
        let prefix = match tokens.first() {
            Some(Token::Char(_)) => runs.first().cloned().unwrap_or_default(),
            _ => String::new(),
        };
        let required = runs.into_iter().max_by_key(String::len).unwrap_or_default();
        let shape = match tokens.as_slice() {
            [Token::Star] => Shape::AnyName,
            [Token::Globstar] => Shape::Anything,
            all if all.iter().all(|t| matches!(t, Token::Char(_))) => Shape::Literal,
            _ => Shape::Nfa,
        };
        Ok(Glob {
            pattern: pattern.to_owned(),
            states: build(&tokens),
            prefix,
            required,
            shape,
        })
    }

    /// The pattern text, as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `text` matches the whole glob.
    pub fn matches(&self, text: &str) -> bool {
        match self.shape {
            Shape::Literal => text == self.prefix,
            Shape::AnyName => !text.contains('/'),
            Shape::Anything => true,
            Shape::Nfa => self.nfa_matches(text),
        }
    }

    fn nfa_matches(&self, text: &str) -> bool {
        if !text.starts_with(&self.prefix)
            || (!self.required.is_empty() && !text.contains(&self.required))
        {
            return false;
        }
        self.run(text)
            .is_some_and(|live| live[self.states.len() - 1])
    }

    /// Whether some path strictly below the directory `dir` could match: the glob protects
    /// something inside `dir`, so moving or deleting `dir` would touch it. Every state of a
    /// glob's NFA can still reach the end (each step consumes a character some text has), so
    /// "still live after `dir/`" is exactly "some continuation matches".
    pub fn matches_below(&self, dir: &str) -> bool {
        let mut text = String::with_capacity(dir.len() + 1);
        text.push_str(dir.trim_end_matches('/'));
        text.push('/');
        self.run(&text).is_some()
    }

    /// Simulates the NFA over `text`; `None` once no state is live.
    fn run(&self, text: &str) -> Option<Vec<bool>> {
        let n = self.states.len();
        let mut current = vec![false; n];
        let mut next = vec![false; n];
        let mut stack = Vec::with_capacity(n);
        self.close(0, &mut current, &mut stack);
        for c in text.chars() {
            next.iter_mut().for_each(|b| *b = false);
            let mut any = false;
            for (s, _) in current.iter().enumerate().filter(|(_, on)| **on) {
                for &(class, to) in &self.states[s].on {
                    if class.accepts(c) {
                        self.close(to, &mut next, &mut stack);
                        any = true;
                    }
                }
            }
            if !any {
                return None;
            }
            std::mem::swap(&mut current, &mut next);
        }
        Some(current)
    }

    /// Adds `from` and every state reachable from it by ε-moves to `set`.
    fn close(&self, from: usize, set: &mut [bool], stack: &mut Vec<usize>) {
        stack.push(from);
        while let Some(s) = stack.pop() {
            if !set[s] {
                set[s] = true;
                stack.extend(self.states[s].eps.iter().copied());
            }
        }
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

impl<'de> Deserialize<'de> for Glob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pattern = String::deserialize(deserializer)?;
        Glob::new(&pattern).map_err(serde::de::Error::custom)
    }
}

fn tokenize(pattern: &str) -> Result<Vec<Token>, GlobError> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let Some(&c) = chars.get(i + 1) else {
                    return Err(GlobError::TrailingBackslash {
                        pattern: pattern.to_owned(),
                    });
                };
                tokens.push(Token::Char(c));
                i += 2;
            }
            '?' => {
                tokens.push(Token::One);
                i += 1;
            }
            '*' => {
                let run = chars[i..].iter().take_while(|&&c| c == '*').count();
                i += run;
                if run == 1 {
                    tokens.push(Token::Star);
                    continue;
                }
                let after_slash = matches!(tokens.last(), None | Some(Token::Char('/')));
                if after_slash && chars.get(i) == Some(&'/') {
                    tokens.push(Token::GlobstarDir);
                    i += 1;
                } else if i == chars.len() && tokens.last() == Some(&Token::Char('/')) {
                    tokens.pop();
                    tokens.push(Token::SlashGlobstarEnd);
                } else {
                    tokens.push(Token::Globstar);
                }
            }
            c => {
                tokens.push(Token::Char(c));
                i += 1;
            }
        }
    }
    Ok(tokens)
}

/// The runs of literal characters between wildcards, in order. Each must appear verbatim in
/// any text the pattern matches.
fn literal_runs(tokens: &[Token]) -> Vec<String> {
    let mut runs = vec![String::new()];
    for token in tokens {
        match token {
            Token::Char(c) => runs.last_mut().expect("never empty").push(*c),
            _ => runs.push(String::new()),
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

/// Builds the NFA: state 0 is the start, the last state accepts.
fn build(tokens: &[Token]) -> Vec<State> {
    let mut states = vec![State::default()];
    for &token in tokens {
        let s = states.len() - 1;
        match token {
            Token::Char(c) => {
                states[s].on.push((Class::Char(c), s + 1));
                states.push(State::default());
            }
            Token::One => {
                states[s].on.push((Class::NotSlash, s + 1));
                states.push(State::default());
            }
            Token::Star | Token::Globstar => {
                let class = if token == Token::Star {
                    Class::NotSlash
                } else {
                    Class::Any
                };
                states[s].on.push((class, s));
                states[s].eps.push(s + 1);
                states.push(State::default());
            }
            Token::GlobstarDir => {
                // s: ε to done; any char to `inside`; `inside` loops and leaves after a `/`.
                let (inside, done) = (s + 1, s + 2);
                states[s].eps.push(done);
                states[s].on.push((Class::Char('/'), done));
                states[s].on.push((Class::Any, inside));
                states.push(State {
                    on: vec![(Class::Char('/'), done), (Class::Any, inside)],
                    eps: Vec::new(),
                });
                states.push(State::default());
            }
            Token::SlashGlobstarEnd => {
                // s: ε to done, or `/` then any text (the loop) and ε to done.
                let (inside, done) = (s + 1, s + 2);
                states[s].eps.push(done);
                states[s].on.push((Class::Char('/'), inside));
                states.push(State {
                    on: vec![(Class::Any, inside)],
                    eps: vec![done],
                });
                states.push(State::default());
            }
        }
    }
    states
}

/// An ordered list of globs, for allow and deny lists. Deserializes from a list of strings.
#[derive(Debug, Clone, Default)]
pub struct GlobSet {
    globs: Vec<Glob>,
}

impl GlobSet {
    /// Compiles every pattern; the first invalid one is the error.
    pub fn new<I, S>(patterns: I) -> Result<GlobSet, GlobError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let globs = patterns
            .into_iter()
            .map(|p| Glob::new(p.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(GlobSet { globs })
    }

    /// The pattern text of the first glob (in list order) that matches `text`.
    pub fn first_match(&self, text: &str) -> Option<&str> {
        self.globs
            .iter()
            .find(|g| g.matches(text))
            .map(Glob::as_str)
    }

    /// Whether any glob matches `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.first_match(text).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    pub fn len(&self) -> usize {
        self.globs.len()
    }

    /// The globs, in list order.
    pub fn iter(&self) -> impl Iterator<Item = &Glob> {
        self.globs.iter()
    }

    /// The patterns as a readable list for messages: `` `a`, `b` ``, or `(none)`.
    pub fn describe(&self) -> String {
        if self.globs.is_empty() {
            return "(none)".to_owned();
        }
        let quoted: Vec<String> = self.globs.iter().map(|g| format!("`{g}`")).collect();
        quoted.join(", ")
    }
}

impl<'de> Deserialize<'de> for GlobSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let patterns = Vec::<String>::deserialize(deserializer)?;
        GlobSet::new(&patterns).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, text: &str) -> bool {
        Glob::new(pattern).expect("valid glob").matches(text)
    }

    #[test]
    fn shapes_match_as_the_nfa_does() {
        let names = ["", "a", "*", "a*b", "a/b", "/", "größe", "grösse"];
        let tools = ["host_exec", "host_exec2", "x/host_exec"];
        let texts: Vec<&str> = names.into_iter().chain(tools).collect();
        let plain = ["host_exec", r"a\*b", r"\*", "a/b", "/", "größe"];
        for pattern in ["*", "**", "***"].into_iter().chain(plain) {
            let glob = Glob::new(pattern).expect("valid glob");
            assert_ne!(glob.shape, Shape::Nfa, "{pattern}");
            for &text in &texts {
                let nfa = glob.nfa_matches(text);
                assert_eq!(glob.matches(text), nfa, "{pattern} on {text:?}");
            }
        }
        assert_eq!(Glob::new("a*").expect("valid").shape, Shape::Nfa);
    }

    #[test]
    fn table() {
        // (pattern, text, expected)
        let cases = [
            ("*", "submit_job", true),
            ("*", "", true),
            ("*", "a/b", false),
            ("read_*", "read_file", true),
            ("read_*", "read_", true),
            ("read_*", "write_file", false),
            ("read_*", "Read_file", false),
            ("*_dangerous", "rm_dangerous", true),
            ("*_dangerous", "rm_dangerous_not", false),
            ("host_exec", "host_exec", true),
            ("host_exec", "host_exec2", false),
            ("?", "a", true),
            ("?", "", false),
            ("?", "ab", false),
            ("?", "/", false),
            ("a?c", "abc", true),
            ("a?c", "a/c", false),
            ("fs__???", "fs__cat", true),
            ("fs__???", "fs__ls", false),
            ("/workspace/*", "/workspace/a", true),
            ("/workspace/*", "/workspace/a/b", false),
            ("/workspace/*", "/workspace", false),
            ("/workspace/*.txt", "/workspace/notes.txt", true),
            ("/workspace/*.txt", "/workspace/d/notes.txt", false),
            ("**", "", true),
            ("**", "/a/b/c", true),
            ("**/.ssh/**", "/home/a/.ssh/id", true),
            ("**/.ssh/**", "/.ssh/x", true),
            ("**/.ssh/**", ".ssh/x", true),
            ("**/.ssh/**", "/home/a/.ssh", true),
            ("**/.ssh/**", "/home/a/.sshx/id", false),
            ("**/.ssh/**", "/home/a/x.ssh/id", false),
            ("**/.git/**", "/workspace/repo/.git/config", true),
            ("**/.git/**", "/workspace/.gitignore", false),
            ("/workspace/inputs/**", "/workspace/inputs/a/b", true),
            ("/workspace/inputs/**", "/workspace/inputs", true),
            ("/workspace/inputs/**", "/workspace/inputs2", false),
            ("/workspace/inputs/**", "/workspace/inputs2/a", false),
            ("/workspace/inputs/**", "/workspace", false),
            ("/**", "/anything/at/all", true),
            ("a/**/b", "a/b", true),
            ("a/**/b", "a/x/b", true),
            ("a/**/b", "a/x/y/b", true),
            ("a/**/b", "a/xb", false),
            ("a/**/b", "ab", false),
            ("/a/**/*.py", "/a/x.py", true),
            ("/a/**/*.py", "/a/b/c/x.py", true),
            ("/a/**/*.py", "/a/b/c/x.pyc", false),
            ("a**b", "a/x/b", true),
            ("a**b", "ab", true),
            ("**.txt", "/x/y.txt", true),
            ("a***b", "a/x/b", true),
            ("/x/**/", "/x/", true),
            ("/x/**/", "/x/a/", true),
            ("/x/**/", "/x/a", false),
            (r"a\*b", "a*b", true),
            (r"a\*b", "axb", false),
            (r"what\?", "what?", true),
            (r"what\?", "whatx", false),
            (r"a\\b", r"a\b", true),
            ("[ab]", "[ab]", true),
            ("[ab]", "a", false),
            ("données/*", "données/é", true),
            ("?", "é", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                m(pattern, text),
                expected,
                "glob `{pattern}` against `{text}`"
            );
        }
    }

    #[test]
    fn matches_below_finds_protected_descendants() {
        let cases = [
            ("/workspace/inputs/**", "/workspace", true),
            ("/workspace/inputs/**", "/workspace/", true),
            ("/workspace/inputs/**", "/", true),
            ("/workspace/inputs/**", "/workspace/inputs", true),
            ("/workspace/inputs/**", "/workspace/inputs2", false),
            ("/workspace/inputs/**", "/workspace/out", false),
            ("/workspace/inputs/**", "/output", false),
            ("/workspace/a/*.key", "/workspace/a", true),
            ("/workspace/a/*.key", "/workspace/b", false),
            ("/workspace/*/secret", "/workspace/x", true),
            ("/workspace/*/secret", "/workspace/x/y", false),
            ("**/.git/**", "/workspace/anything", true),
            ("/data", "/", true),
            ("/data", "/data", false),
        ];
        for (pattern, dir, below) in cases {
            assert_eq!(
                Glob::new(pattern).unwrap().matches_below(dir),
                below,
                "{pattern} below {dir}"
            );
        }
    }

    #[test]
    fn errors() {
        assert_eq!(Glob::new("").unwrap_err(), GlobError::Empty);
        let err = Glob::new(r"abc\").unwrap_err();
        assert!(err.to_string().contains("`abc\\`"), "{err}");
    }

    #[test]
    fn hostile_patterns_stay_linear() {
        let pattern = format!("{}b", "a*".repeat(40));
        let text = "a".repeat(20_000);
        let glob = Glob::new(&pattern).unwrap();
        let start = std::time::Instant::now();
        assert!(!glob.matches(&text));
        let globstars = format!("{}b", "**a".repeat(40));
        assert!(!Glob::new(&globstars).unwrap().matches(&text));
        let dirs = format!("{}b", "**/a/".repeat(40));
        assert!(!Glob::new(&dirs).unwrap().matches(&"/a".repeat(10_000)));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "took {:?}",
            start.elapsed()
        );
        assert!(glob.matches(&format!("{text}b")));
    }

    #[test]
    fn set_reports_first_matching_pattern() {
        let set = GlobSet::new(["read_*", "*_file", "list_*"]).unwrap();
        assert_eq!(set.first_match("read_file"), Some("read_*"));
        assert_eq!(set.first_match("write_file"), Some("*_file"));
        assert_eq!(set.first_match("delete_path"), None);
        assert!(set.is_match("list_directory"));
        assert_eq!(set.len(), 3);
        assert_eq!(set.describe(), "`read_*`, `*_file`, `list_*`");
        assert_eq!(GlobSet::default().describe(), "(none)");
        assert!(GlobSet::new(["ok", ""]).is_err());
    }

    #[test]
    fn deserializes_and_reports_bad_patterns() {
        let set: GlobSet = serde_json::from_str(r#"["a*", "b?"]"#).unwrap();
        assert_eq!(set.first_match("bx"), Some("b?"));
        let err = serde_json::from_str::<GlobSet>(r#"["x\\"]"#).unwrap_err();
        assert!(err.to_string().contains("lone"), "{err}");
        let glob: Glob = serde_json::from_str(r#""**/x""#).unwrap();
        assert_eq!(glob.to_string(), "**/x");
    }
}
