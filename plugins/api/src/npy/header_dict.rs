//! The header dict of a `.npy` file, a Python literal (`{'descr': '<f4', 'fortran_order':
//! False, 'shape': (970, 1042), }`), parsed without a Python parser: strings, booleans, tuples
//! of sizes, and lists (kept as text, for structured dtypes to be refused by name).

/// A Python literal in a `.npy` header dict.
#[derive(Debug, PartialEq)]
pub(super) enum Literal {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
    /// A list, as its text: a structured dtype's fields, which are refused by name.
    List(String),
}

/// The three entries of a header dict, as written.
pub(super) struct HeaderFields {
    pub descr: Literal,
    pub fortran_order: bool,
    pub shape: Vec<usize>,
}

/// Parses `{'descr': ..., 'fortran_order': ..., 'shape': (...), }`.
pub(super) fn parse_header_dict(text: &str) -> Result<HeaderFields, String> {
    let entries = DictParser { chars: text.chars().collect(), at: 0 }.parse()?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (key, value) in entries {
        match (key.as_str(), value) {
            ("descr", d @ (Literal::Str(_) | Literal::List(_))) => descr = Some(d),
            ("fortran_order", Literal::Bool(f)) => fortran = Some(f),
            ("shape", Literal::Tuple(s)) => shape = Some(s),
            ("descr" | "fortran_order" | "shape", other) => {
                return Err(format!("`{key}` has the wrong type: {other:?}"));
            }
            (other, _) => return Err(format!("unexpected key '{other}'")),
        }
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran_order), Some(shape)) => Ok(HeaderFields { descr, fortran_order, shape }),
        _ => Err("the keys 'descr', 'fortran_order' and 'shape' are required".into()),
    }
}

/// A recursive-descent parser for the small subset of Python literals `.npy` headers use.
struct DictParser {
    chars: Vec<char>,
    at: usize,
}

impl DictParser {
    fn parse(mut self) -> Result<Vec<(String, Literal)>, String> {
        self.expect('{')?;
        let mut entries = Vec::new();
        loop {
            if self.eat('}') {
                break;
            }
            let key = match self.literal()? {
                Literal::Str(key) => key,
                other => return Err(format!("expected a string key, found {other:?}")),
            };
            self.expect(':')?;
            entries.push((key, self.literal()?));
            if !self.eat(',') {
                self.expect('}')?;
                break;
            }
        }
        self.skip_space();
        if self.at != self.chars.len() {
            return Err(format!("unexpected text after the dict at offset {}", self.at));
        }
        Ok(entries)
    }

    fn literal(&mut self) -> Result<Literal, String> {
        self.skip_space();
        match self.chars.get(self.at) {
            Some(&quote @ ('\'' | '"')) => {
                self.at += 1;
                let start = self.at;
                while self.chars.get(self.at).is_some_and(|&c| c != quote) {
                    self.at += 1;
                }
                let text: String = self.chars[start..self.at].iter().collect();
                self.expect(quote)?;
                Ok(Literal::Str(text))
            }
            Some('[') => self.bracketed().map(Literal::List),
            Some('(') => {
                self.at += 1;
                let mut dims = Vec::new();
                loop {
                    if self.eat(')') {
                        break;
                    }
                    dims.push(self.whole_number()?);
                    if !self.eat(',') {
                        self.expect(')')?;
                        break;
                    }
                }
                Ok(Literal::Tuple(dims))
            }
            _ => {
                if self.word("True") {
                    Ok(Literal::Bool(true))
                } else if self.word("False") {
                    Ok(Literal::Bool(false))
                } else {
                    Err(format!("unsupported value at offset {}", self.at))
                }
            }
        }
    }

    /// The text of a bracketed literal (`[...]`, nesting and quoted brackets allowed), whole.
    fn bracketed(&mut self) -> Result<String, String> {
        let start = self.at;
        let mut depth = 0usize;
        let mut quote = None;
        while let Some(&c) = self.chars.get(self.at) {
            self.at += 1;
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '[' | '(') => depth += 1,
                (None, ']' | ')') => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(self.chars[start..self.at].iter().collect());
                    }
                }
                _ => {}
            }
        }
        Err(format!("unclosed '[' at offset {start}"))
    }

    fn whole_number(&mut self) -> Result<usize, String> {
        self.skip_space();
        let start = self.at;
        while self.chars.get(self.at).is_some_and(char::is_ascii_digit) {
            self.at += 1;
        }
        let digits: String = self.chars[start..self.at].iter().collect();
        // Python 2 wrote longs as `3L`.
        self.eat('L');
        digits.parse().map_err(|_| format!("expected a dimension at offset {start}"))
    }

    fn word(&mut self, word: &str) -> bool {
        let len = word.chars().count();
        let matches = self.chars.get(self.at..self.at + len).is_some_and(|s| s.iter().copied().eq(word.chars()));
        if matches {
            self.at += len;
        }
        matches
    }

    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    /// Skips spaces, then consumes `c` if it is next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        let found = self.chars.get(self.at) == Some(&c);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) { Ok(()) } else { Err(format!("expected '{c}' at offset {}", self.at)) }
    }
}
