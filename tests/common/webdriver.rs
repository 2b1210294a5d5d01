//! A real browser for the pages halite serves: Debian's headless
//! `chromium` driven through `chromedriver` (package `chromium-driver`)
//! over the W3C WebDriver protocol, spoken with the library's HTTP client.
//! Only what the tests use: open a page, run a script, wait for a
//! condition, click, take a screenshot.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{free_port, request, wait_until_listening};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless
    /// chromium session `width` × `height` pixels.
    pub fn start(width: u32, height: u32) -> Browser {
        Browser::start_with(width, height, &[])
    }

    /// [`Browser::start`] with more chromium switches
    /// (`--host-resolver-rules=…`, say).
    pub fn start_with(width: u32, height: u32, switches: &[String]) -> Browser {
        for exe in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                Path::new(exe).exists(),
                "{exe} is missing: install Debian's chromium and chromium-driver (`make test` does)"
            );
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr = format!("127.0.0.1:{port}");
        wait_until_listening(&addr, "chromedriver");
        let profile = tempfile::tempdir().expect("browser profile dir");
        // Without the background-networking switches chromium keeps
        // trying hosts this machine cannot reach.
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ]
        .map(String::from)
        .into();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        args.extend(switches.iter().cloned());
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": args,
            },
        }}});
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let answer = browser.call("POST", "/session", &caps);
        browser.session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_string();
        browser
    }

    /// One WebDriver command; its `value`, or a panic naming the error.
    fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let body = if method == "GET" || method == "DELETE" {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let r = request(&self.addr, method, path, Some("application/json"), &body)
            .unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"));
        let v = r.json();
        assert_eq!(r.status, 200, "webdriver {method} {path}: {}", r.text());
        v["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", &self.session_path("/url"), &json!({"url": url}));
    }

    /// Runs `script` (a function body: `return …`) in the page.
    pub fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            &json!({"script": script, "args": []}),
        )
    }

    /// Polls `script` until it returns something other than null/false;
    /// panics with `what` after `timeout`.
    pub fn wait_for(&self, script: &str, timeout: Duration, what: &str) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(script);
            if !v.is_null() && v != Value::Bool(false) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the page did not get there: {what}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the first element matching a CSS selector.
    pub fn click(&self, selector: &str) {
        let e = self.call(
            "POST",
            &self.session_path("/element"),
            &json!({"using": "css selector", "value": selector}),
        );
        let id = e
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {selector}: {e}"))
            .to_string();
        self.call(
            "POST",
            &self.session_path(&format!("/element/{id}/click")),
            &json!({}),
        );
    }

    /// Saves a PNG of the viewport to `path`.
    pub fn screenshot(&self, path: &Path) {
        let b64 = self.call("GET", &self.session_path("/screenshot"), &Value::Null);
        let png = base64_decode(b64.as_str().expect("screenshot is base64"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("artefact dir");
        }
        std::fs::write(path, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = request(
                &self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
                b"",
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (with padding), as WebDriver sends screenshots.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let mut n = 0u32;
        for (i, &c) in data.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        for i in 0..data.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}
