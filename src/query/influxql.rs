//! InfluxQL, the subset halite answers (docs/compatibility.md): the
//! statements Telegraf and Grafana send to set up and browse a database.
//! Parse errors read as InfluxDB's (`found X, expected Y at line 1, char
//! N`), so clients show the same messages.

/// One statement of a `/query` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    CreateDatabase {
        name: String,
    },
    ShowDatabases,
    ShowRetentionPolicies {
        on: Option<String>,
    },
    ShowMeasurements {
        on: Option<String>,
        limit: Option<usize>,
    },
    ShowTagKeys {
        on: Option<String>,
        from: Option<String>,
        limit: Option<usize>,
    },
    ShowTagValues {
        on: Option<String>,
        from: Option<String>,
        keys: Vec<String>,
        limit: Option<usize>,
    },
    ShowFieldKeys {
        on: Option<String>,
        from: Option<String>,
        limit: Option<usize>,
    },
    ShowSeries {
        on: Option<String>,
        from: Option<String>,
        limit: Option<usize>,
    },
    /// A statement InfluxQL has that halite does not answer yet (its
    /// first words, for the error).
    Unsupported(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A bare word (keywords among them).
    Ident(String),
    /// A double-quoted identifier.
    Quoted(String),
    /// A single-quoted string.
    Str(String),
    Number(String),
    Punct(char),
    Semicolon,
    Eof,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) | Token::Number(s) => s.clone(),
            Token::Quoted(s) => format!("\"{s}\""),
            Token::Str(s) => format!("'{s}'"),
            Token::Punct(c) => c.to_string(),
            Token::Semicolon => ";".into(),
            Token::Eof => "EOF".into(),
        }
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self, Token::Ident(s) if s.eq_ignore_ascii_case(word))
    }
}

/// A token and where it starts (line, char; both from 1).
type Located = (Token, usize, usize);

fn lex(text: &str) -> Result<Vec<Located>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let advance = |i: &mut usize, line: &mut usize, col: &mut usize, c: char| {
        *i += 1;
        if c == '\n' {
            *line += 1;
            *col = 1;
        } else {
            *col += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let (at_line, at_col) = (line, col);
        if c.is_whitespace() {
            advance(&mut i, &mut line, &mut col, c);
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let mut word = String::new();
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                let d = chars[i];
                word.push(d);
                advance(&mut i, &mut line, &mut col, d);
            }
            out.push((Token::Ident(word), at_line, at_col));
            continue;
        }
        if c.is_ascii_digit() {
            let mut n = String::new();
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                let d = chars[i];
                n.push(d);
                advance(&mut i, &mut line, &mut col, d);
            }
            out.push((Token::Number(n), at_line, at_col));
            continue;
        }
        if c == '"' || c == '\'' {
            advance(&mut i, &mut line, &mut col, c);
            let mut s = String::new();
            loop {
                let Some(&d) = chars.get(i) else {
                    return Err(format!(
                        "unterminated {} at line {at_line}, char {at_col}",
                        if c == '"' {
                            "quoted identifier"
                        } else {
                            "string"
                        }
                    ));
                };
                advance(&mut i, &mut line, &mut col, d);
                if d == '\\' {
                    if let Some(&e) = chars.get(i) {
                        advance(&mut i, &mut line, &mut col, e);
                        match e {
                            'n' => s.push('\n'),
                            '\\' | '"' | '\'' => s.push(e),
                            other => {
                                s.push('\\');
                                s.push(other);
                            }
                        }
                    }
                    continue;
                }
                if d == c {
                    break;
                }
                s.push(d);
            }
            let token = if c == '"' {
                Token::Quoted(s)
            } else {
                Token::Str(s)
            };
            out.push((token, at_line, at_col));
            continue;
        }
        advance(&mut i, &mut line, &mut col, c);
        out.push((
            if c == ';' {
                Token::Semicolon
            } else {
                Token::Punct(c)
            },
            at_line,
            at_col,
        ));
    }
    // InfluxDB's scanner places EOF one char past the end.
    out.push((Token::Eof, line, col + 1));
    Ok(out)
}

struct Parser {
    tokens: Vec<Located>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at].0
    }

    fn next(&mut self) -> Located {
        let t = self.tokens[self.at].clone();
        if self.at + 1 < self.tokens.len() {
            self.at += 1;
        }
        t
    }

    fn error(&self, expected: &str) -> String {
        let (t, line, col) = &self.tokens[self.at];
        format!(
            "found {}, expected {expected} at line {line}, char {col}",
            t.describe()
        )
    }

    fn word(&mut self, word: &str) -> Result<(), String> {
        if self.peek().is_word(word) {
            self.next();
            Ok(())
        } else {
            Err(self.error(word))
        }
    }

    fn accept(&mut self, word: &str) -> bool {
        if self.peek().is_word(word) {
            self.next();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Result<String, String> {
        match self.peek().clone() {
            Token::Ident(s) | Token::Quoted(s) => {
                self.next();
                Ok(s)
            }
            _ => Err(self.error("identifier")),
        }
    }

    fn on_clause(&mut self) -> Result<Option<String>, String> {
        if self.accept("ON") {
            Ok(Some(self.ident()?))
        } else {
            Ok(None)
        }
    }

    /// `FROM m` (one measurement; `FROM "rp"."m"` names its retention
    /// policy first).
    fn parse_from(&mut self) -> Result<Option<String>, String> {
        if !self.accept("FROM") {
            return Ok(None);
        }
        let mut name = self.ident()?;
        while matches!(self.peek(), Token::Punct('.')) {
            self.next();
            name = self.ident()?;
        }
        Ok(Some(name))
    }

    fn limit_clause(&mut self) -> Result<Option<usize>, String> {
        if !self.accept("LIMIT") {
            return Ok(None);
        }
        match self.peek().clone() {
            Token::Number(n) => {
                let v = n.parse().map_err(|_| self.error("integer"))?;
                self.next();
                Ok(Some(v))
            }
            _ => Err(self.error("integer")),
        }
    }

    /// Skips to the end of this statement, for one halite does not answer.
    fn rest_unsupported(&mut self, head: &str) -> Statement {
        while !matches!(self.peek(), Token::Semicolon | Token::Eof) {
            self.next();
        }
        Statement::Unsupported(head.to_string())
    }

    fn statement(&mut self) -> Result<Statement, String> {
        let first = self.peek().clone();
        if first.is_word("CREATE") {
            self.next();
            if self.accept("DATABASE") {
                let name = self.ident()?;
                if !matches!(self.peek(), Token::Semicolon | Token::Eof) {
                    return Ok(self.rest_unsupported("CREATE DATABASE … WITH"));
                }
                return Ok(Statement::CreateDatabase { name });
            }
            return Ok(self.rest_unsupported("CREATE"));
        }
        if first.is_word("SHOW") {
            self.next();
            let what = self.peek().clone();
            if what.is_word("DATABASES") {
                self.next();
                return Ok(Statement::ShowDatabases);
            }
            if what.is_word("RETENTION") {
                self.next();
                self.word("POLICIES")?;
                let on = self.on_clause()?;
                return Ok(Statement::ShowRetentionPolicies { on });
            }
            if what.is_word("MEASUREMENTS") {
                self.next();
                let on = self.on_clause()?;
                if self.peek().is_word("WITH") || self.peek().is_word("WHERE") {
                    return Ok(self.rest_unsupported("SHOW MEASUREMENTS WITH/WHERE"));
                }
                let limit = self.limit_clause()?;
                return Ok(Statement::ShowMeasurements { on, limit });
            }
            if what.is_word("TAG") {
                self.next();
                if self.accept("KEYS") {
                    let on = self.on_clause()?;
                    let from = self.parse_from()?;
                    if self.peek().is_word("WHERE") {
                        return Ok(self.rest_unsupported("SHOW TAG KEYS … WHERE"));
                    }
                    let limit = self.limit_clause()?;
                    return Ok(Statement::ShowTagKeys { on, from, limit });
                }
                self.word("VALUES")?;
                let on = self.on_clause()?;
                let from = self.parse_from()?;
                self.word("WITH")?;
                self.word("KEY")?;
                let keys = match self.peek().clone() {
                    Token::Punct('=') => {
                        self.next();
                        vec![self.ident()?]
                    }
                    t if t.is_word("IN") => {
                        self.next();
                        if !matches!(self.peek(), Token::Punct('(')) {
                            return Err(self.error("("));
                        }
                        self.next();
                        let mut keys = vec![self.ident()?];
                        while matches!(self.peek(), Token::Punct(',')) {
                            self.next();
                            keys.push(self.ident()?);
                        }
                        if !matches!(self.peek(), Token::Punct(')')) {
                            return Err(self.error(")"));
                        }
                        self.next();
                        keys
                    }
                    _ => return Ok(self.rest_unsupported("SHOW TAG VALUES WITH KEY =~/!=")),
                };
                if self.peek().is_word("WHERE") {
                    return Ok(self.rest_unsupported("SHOW TAG VALUES … WHERE"));
                }
                let limit = self.limit_clause()?;
                return Ok(Statement::ShowTagValues {
                    on,
                    from,
                    keys,
                    limit,
                });
            }
            if what.is_word("FIELD") {
                self.next();
                self.word("KEYS")?;
                let on = self.on_clause()?;
                let from = self.parse_from()?;
                let limit = self.limit_clause()?;
                return Ok(Statement::ShowFieldKeys { on, from, limit });
            }
            if what.is_word("SERIES") {
                self.next();
                let on = self.on_clause()?;
                let from = self.parse_from()?;
                if self.peek().is_word("WHERE") {
                    return Ok(self.rest_unsupported("SHOW SERIES … WHERE"));
                }
                let limit = self.limit_clause()?;
                return Ok(Statement::ShowSeries { on, from, limit });
            }
            if let Token::Ident(w) = what {
                return Ok(self.rest_unsupported(&format!("SHOW {}", w.to_ascii_uppercase())));
            }
            return Err(self.error(
                "CONTINUOUS, DATABASES, DIAGNOSTICS, FIELD, GRANTS, MEASUREMENT, MEASUREMENTS, QUERIES, RETENTION, SERIES, SHARD, SHARDS, STATS, SUBSCRIPTIONS, TAG, USERS",
            ));
        }
        for head in [
            "SELECT", "DELETE", "DROP", "EXPLAIN", "GRANT", "REVOKE", "ALTER", "SET", "KILL",
        ] {
            if first.is_word(head) {
                return Ok(self.rest_unsupported(head));
            }
        }
        Err(self
            .error("SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL"))
    }
}

/// Parses a `/query` text: statements separated by `;`. The error is
/// InfluxDB's parse error text (without its "error parsing query: ").
pub fn parse(text: &str) -> Result<Vec<Statement>, String> {
    let tokens = lex(text)?;
    let mut p = Parser { tokens, at: 0 };
    let mut out = Vec::new();
    loop {
        while matches!(p.peek(), Token::Semicolon) {
            p.next();
        }
        if matches!(p.peek(), Token::Eof) {
            break;
        }
        out.push(p.statement()?);
        match p.peek() {
            Token::Semicolon | Token::Eof => {}
            _ => return Err(p.error(";")),
        }
    }
    if out.is_empty() {
        return Err(p.error(
            "SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_telegraf_and_grafana_send() {
        assert_eq!(
            parse(r#"CREATE DATABASE "telegraf""#),
            Ok(vec![Statement::CreateDatabase {
                name: "telegraf".into()
            }])
        );
        assert_eq!(
            parse("SHOW measurements"),
            Ok(vec![Statement::ShowMeasurements {
                on: None,
                limit: None
            }])
        );
        assert_eq!(
            parse(r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" LIMIT 5; show databases"#),
            Ok(vec![
                Statement::ShowTagValues {
                    on: None,
                    from: Some("cpu".into()),
                    keys: vec!["host".into()],
                    limit: Some(5)
                },
                Statement::ShowDatabases
            ])
        );
        assert_eq!(
            parse(r#"SHOW TAG VALUES ON db FROM "autogen"."cpu" WITH KEY IN ("a", b)"#),
            Ok(vec![Statement::ShowTagValues {
                on: Some("db".into()),
                from: Some("cpu".into()),
                keys: vec!["a".into(), "b".into()],
                limit: None
            }])
        );
        assert_eq!(
            parse("SELECT mean(v) FROM cpu"),
            Ok(vec![Statement::Unsupported("SELECT".into())])
        );
    }

    #[test]
    fn errors_read_as_influxdbs() {
        assert_eq!(
            parse("blah").unwrap_err(),
            "found blah, expected SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL at line 1, char 1"
        );
        assert_eq!(
            parse("SHOW TAG VALUES FROM cpu").unwrap_err(),
            "found EOF, expected WITH at line 1, char 26"
        );
        assert_eq!(
            parse("CREATE DATABASE 'x'").unwrap_err(),
            "found 'x', expected identifier at line 1, char 17"
        );
        assert!(parse("SHOW \"unterminated").is_err());
        assert!(parse("").is_err());
    }
}
