//! Predict first: no lesson answer is shown before its question is answered. The
//! answers, and the tokens that would give each away, are kept in `lab/answers.txt`;
//! this scans the lessons' own texts (intro, questions, observations and feedback shown
//! before each question), the worksheets, README.md, the help and error texts, and the
//! page's files for them, as whole tokens.

mod common;
use common::idem;

use idem_lab::lesson::{LESSONS, Lesson};

/// A token of text: a whole number, a range, or a list of numbers (`5, 8, 13`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Number(i64),
    Range(i64, i64),
    List(Vec<i64>),
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Range(a, b) => write!(f, "{a}..{b}"),
            Self::List(l) => {
                let s: Vec<String> = l.iter().map(i64::to_string).collect();
                f.write_str(&s.join(", "))
            }
        }
    }
}

/// The tokens of `text`: every whole number and range (not part of a word such as
/// `p17`, of a decimal such as `3.1.1`, or of `1,924`), and every maximal list of
/// numbers separated by `, ` (a list of one is a number only).
fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut out = Vec::new();
    let mut list: Vec<i64> = Vec::new();
    let mut list_end = usize::MAX;
    let mut i = 0;
    while i < b.len() {
        // Not a token: digits inside a word (`p17`, `utf-8`), a decimal (`3.1.1`) or a
        // number with a thousands separator (`1,924`).
        let inside = i > 0
            && (word(b[i - 1])
                || b[i - 1] == b'.'
                || (i > 1 && matches!(b[i - 1], b'-' | b',') && b[i - 2].is_ascii_alphanumeric()));
        if !b[i].is_ascii_digit() || inside {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = digits(i);
        let a: Option<i64> = text[start..end].parse().ok();
        let mut range = None;
        if b[end..].starts_with(b"..") && b.get(end + 2).is_some_and(u8::is_ascii_digit) {
            let e2 = digits(end + 2);
            range = text[end + 2..e2].parse::<i64>().ok();
            end = e2;
        }
        let next = b.get(end).copied();
        let glued = next.is_some_and(|c| {
            word(c) || (matches!(c, b'.' | b',') && b.get(end + 1).is_some_and(u8::is_ascii_digit))
        });
        i = end;
        let Some(a) = a.filter(|_| !glued) else {
            continue;
        };
        if let Some(r) = range {
            out.push(Token::Range(a, r));
            continue;
        }
        out.push(Token::Number(a));
        if start != list_end {
            if list.len() > 1 {
                out.push(Token::List(std::mem::take(&mut list)));
            }
            list.clear();
        }
        list.push(a);
        // "0, 1 and 2" is one list, as "0, 1, 2" is; "QoS 0 and 1" is none.
        let seps: &[&str] = if list.len() > 1 {
            &[", and ", ", or ", ", ", " and ", " or "]
        } else {
            &[", "]
        };
        list_end = seps
            .iter()
            .find(|sep| b[end..].starts_with(sep.as_bytes()))
            .map_or(usize::MAX, |sep| end + sep.len());
    }
    if list.len() > 1 {
        out.push(Token::List(list));
    }
    out
}

/// Whether `answer` is found in `text` as a whole token; a list must be a whole list.
fn found(text: &str, answer: &Token) -> bool {
    tokens(text).contains(answer)
}

/// One line of `lab/answers.txt`.
#[derive(Debug)]
struct Entry {
    lesson: String,
    question: usize,
    /// The run's answer, as the key prints it.
    answer: String,
    /// The tokens that would give it away.
    tokens: Vec<Token>,
    /// Those of them (marked `!`) distinctive enough to be looked for in README.md, a
    /// document about much else, where a `12` is a Debian release as often as a total.
    everywhere: Vec<Token>,
}

fn answers() -> Vec<Entry> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../lab/answers.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let (head, listed) = line.split_once(':').expect("lesson N = answer : tokens");
        let (name, answer) = head.split_once('=').expect("lesson N = answer");
        let (lesson, question) = name.trim().split_once(' ').unwrap();
        let read = |t: &str| match tokens(t).as_slice() {
            [Token::Number(n)] => Token::Number(*n),
            [t @ Token::Range(..)] => t.clone(),
            [.., Token::List(l)] => Token::List(l.clone()),
            other => panic!("{t:?} reads as {other:?}"),
        };
        let listed: Vec<&str> = listed
            .split(';')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        out.push(Entry {
            lesson: lesson.into(),
            question: question.parse().unwrap(),
            answer: answer.trim().into(),
            tokens: listed
                .iter()
                .map(|t| read(t.trim_start_matches('!')))
                .collect(),
            everywhere: listed
                .iter()
                .filter_map(|t| t.strip_prefix('!'))
                .map(read)
                .collect(),
        });
    }
    out
}

fn lesson_answers<'a>(all: &'a [Entry], lesson: &str) -> Vec<&'a Entry> {
    all.iter().filter(|e| e.lesson == lesson).collect()
}

/// Every listed token of `entries` found in `text`, as `lesson N: token`.
fn hits(entries: &[&Entry], text: &str) -> Vec<String> {
    let found_here = tokens(text);
    entries
        .iter()
        .flat_map(|e| {
            e.tokens
                .iter()
                .filter(|t| found_here.contains(t))
                .map(move |t| format!("{} {}: {t}", e.lesson, e.question))
        })
        .collect()
}

fn stdout(args: &[&str]) -> String {
    let out = idem().args(args).output().unwrap();
    String::from_utf8(out.stdout).unwrap() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn the_tokenizer_reads_whole_tokens_only() {
    let t = tokens("p17 at 0, 1; 40..49 then 5, 8, 13, 16, 20 (3.1.1, 1,924 B, 10s) -5 x2 0.83");
    assert_eq!(
        t,
        vec![
            Token::Number(0),
            Token::Number(1),
            Token::Range(40, 49),
            Token::Number(5),
            Token::List(vec![0, 1]),
            Token::Number(8),
            Token::Number(13),
            Token::Number(16),
            Token::Number(20),
            Token::Number(5),
            Token::List(vec![5, 8, 13, 16, 20]),
        ]
    );
    assert!(!found("5, 8, 12", &Token::List(vec![5, 8, 13, 16, 20])));
    assert!(!found("0, 1, 2", &Token::List(vec![0, 1])));
    assert!(found("offsets 0, 1; or none", &Token::List(vec![0, 1])));
    assert!(!found("QoS 0, 1 and 2", &Token::List(vec![0, 1])));
    assert!(!found("QoS 0 and 1.", &Token::List(vec![0, 1])));
    assert!(found("0, 1 and 2", &Token::List(vec![0, 1, 2])));
    assert!(!found("<meta charset=\"utf-8\">", &Token::Number(8)));
}

/// The list covers every question of every lesson, and each answer is its run's.
#[test]
fn the_list_holds_every_question_with_its_runs_answer() {
    let all = answers();
    for lesson in &LESSONS {
        let listed = lesson_answers(&all, lesson.name);
        assert_eq!(listed.len(), lesson.steps.len(), "{}", lesson.name);
        for (i, (step, e)) in lesson.steps.iter().zip(&listed).enumerate() {
            assert_eq!(e.question, i + 1, "{} {}", lesson.name, i + 1);
            let seen = idem_lab::grade::observe(step).unwrap().value.to_string();
            assert_eq!(
                seen,
                e.answer,
                "{} {}: the run's answer",
                lesson.name,
                i + 1
            );
        }
    }
    assert_eq!(all.iter().map(|e| e.tokens.len()).sum::<usize>(), 21);
    assert_eq!(all.iter().map(|e| e.everywhere.len()).sum::<usize>(), 10);
}

/// What a learner reads before answering question `i`: the intro, the questions up to
/// `i`, and the observations and feedback of the questions before it. Each text comes
/// with the answer it echoes: a tempting answer's feedback names the number typed.
fn shown_before(lesson: &Lesson, i: usize) -> Vec<(String, Option<&'static str>)> {
    let mut s = vec![(lesson.intro.to_string(), None)];
    for (j, step) in lesson.steps.iter().enumerate().take(i + 1) {
        s.push((step.question.to_string(), None));
        if j < i {
            s.push((step.explain.to_string(), None));
            s.extend(
                step.tempting
                    .iter()
                    .map(|t| (t.why.to_string(), Some(t.answer))),
            );
        }
    }
    s
}

#[test]
fn no_observation_or_feedback_answers_a_later_question() {
    let all = answers();
    let mut bad = Vec::new();
    for lesson in &LESSONS {
        let listed = lesson_answers(&all, lesson.name);
        for i in 0..lesson.steps.len() {
            // An earlier question's own answer has been shown by its run.
            let earlier: Vec<String> = listed[..i].iter().map(|e| e.answer.clone()).collect();
            let mut e = clone(listed[i]);
            e.tokens.retain(|t| !earlier.contains(&t.to_string()));
            for (text, echoes) in shown_before(lesson, i) {
                let echoed = echoes.map(tokens).unwrap_or_default();
                for h in hits(&[&e], &text) {
                    if !echoed.iter().any(|t| h.ends_with(&format!(": {t}"))) {
                        bad.push(format!("{h} in {text:?}"));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "shown before its question: {bad:#?}");
}

fn clone(e: &Entry) -> Entry {
    Entry {
        lesson: e.lesson.clone(),
        question: e.question,
        answer: e.answer.clone(),
        tokens: e.tokens.clone(),
        everywhere: e.everywhere.clone(),
    }
}

/// A sheet without its questions' numbers: `8. ` at a line's start, `Questions 6 to 8`,
/// `Observed (8)`, `Why (8)`.
fn numbering_left_out(sheet: &str) -> String {
    let mut out = String::new();
    for line in sheet.lines() {
        let mut line = line.trim_start();
        if let Some((n, rest)) = line.split_once(". ")
            && n.bytes().all(|c| c.is_ascii_digit())
        {
            line = rest;
        }
        let mut line = line.to_string();
        for (open, close) in [
            ("Questions ", " share"),
            ("Observed (", ")"),
            ("Why (", ")"),
        ] {
            while let Some(a) = line.find(open) {
                let b = a + line[a..].find(close).unwrap() + close.len();
                line.replace_range(a..b, "");
            }
        }
        out += &line;
        out.push('\n');
    }
    out
}

#[test]
fn worksheets_hold_no_answer_of_their_lesson() {
    let all = answers();
    let mut bad = Vec::new();
    for lesson in &LESSONS {
        let listed = lesson_answers(&all, lesson.name);
        for format in ["md", "html"] {
            let sheet = numbering_left_out(&stdout(&[
                "lesson",
                lesson.name,
                "--worksheet",
                "--format",
                format,
            ]));
            assert!(sheet.contains(lesson.steps[0].question.split(' ').next().unwrap()));
            for h in hits(&listed, &sheet) {
                bad.push(format!("{format} sheet: {h}"));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn help_and_error_texts_hold_no_answer() {
    let all = answers();
    let every: Vec<&Entry> = all.iter().collect();
    let mut texts = vec![
        stdout(&["--help"]),
        stdout(&["lesson", "--help"]),
        stdout(&["lesson", "nosuch"]),
    ];
    // Each kind of answer, unreadable, at the prompt and with --answers.
    for lesson in &LESSONS {
        for step in lesson.steps {
            for typed in ["", "forty", "x..y", "maybe", "1, x"] {
                if let Err(e) = idem_lab::grade::parse(step.observe, typed) {
                    texts.push(e);
                }
            }
        }
    }
    let n = LESSONS[0].steps.len();
    let bad_first = format!("forty{}", ";1".repeat(n - 1));
    let bad_second = format!("1;forty{}", ";1".repeat(n - 2));
    texts.push(stdout(&["lesson", "ddia", "--answers", &bad_first]));
    texts.push(stdout(&["lesson", "ddia", "--answers", &bad_second]));
    let bad: Vec<String> = texts.iter().flat_map(|t| hits(&every, t)).collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Known failures on the page, each as "file: lesson question: token", while one waits
/// for its fix; an entry left after its fix fails below. None now: the answer fields'
/// hints were `offsets: 40..49, or 0, 1, or none` and `numbers in order: 5, 8, 13`.
const PAGE_KNOWN: &[&str] = &[];

/// The texts a page shows in an empty field: each line that sets a placeholder, and the
/// `hints` object the lessons' answer fields take theirs from.
fn placeholders(text: &str) -> String {
    let mut out = String::new();
    let mut hints = false;
    for line in text.lines() {
        hints |= line.contains("const hints = {");
        if hints || line.contains("placeholder") {
            out += line;
            out.push('\n');
        }
        hints &= !line.trim_start().starts_with("};");
    }
    out
}

#[test]
fn the_pages_placeholders_hold_no_answer() {
    let all = answers();
    let every: Vec<&Entry> = all.iter().collect();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../");
    let mut found_now = Vec::new();
    for file in ["web/page/index.html", "web/page/app.js"] {
        let text = std::fs::read_to_string(format!("{root}{file}")).unwrap();
        let shown = placeholders(&text);
        assert!(shown.contains("placeholder"), "{file}");
        found_now.extend(
            hits(&every, &shown)
                .into_iter()
                .map(|h| format!("{file}: {h}")),
        );
    }
    let new: Vec<&String> = found_now
        .iter()
        .filter(|h| !PAGE_KNOWN.contains(&h.as_str()))
        .collect();
    assert!(new.is_empty(), "answers on the page: {new:#?}");
    let fixed: Vec<&&str> = PAGE_KNOWN
        .iter()
        .filter(|k| !found_now.iter().any(|h| h == *k))
        .collect();
    assert!(
        fixed.is_empty(),
        "fixed on the page: delete from PAGE_KNOWN: {fixed:#?}"
    );
}

#[test]
fn the_readme_holds_no_lesson_answer() {
    let all: Vec<Entry> = answers()
        .into_iter()
        .map(|e| Entry {
            tokens: e.everywhere.clone(),
            ..e
        })
        .collect();
    let every: Vec<&Entry> = all.iter().collect();
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for h in hits(&every, line) {
            bad.push(format!("README.md:{}: {h}", n + 1));
        }
    }
    assert!(
        bad.is_empty(),
        "{} lesson answers in the README: {bad:#?}",
        bad.len()
    );
}

/// The teacher's guide gives every question's answer, as its run gives it, in its
/// lesson's table.
#[test]
fn the_teachers_guide_answers_every_question() {
    let all = answers();
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/teachers.md"))
            .unwrap();
    for lesson in &LESSONS {
        let start = guide
            .find(&format!("\n### {}: ", lesson.name))
            .unwrap_or_else(|| panic!("no section for {}", lesson.name));
        let section = &guide[start + 1..];
        let section = &section[..section.find("\n#").unwrap_or(section.len())];
        let rows = section
            .lines()
            .filter(|l| l.starts_with("| ") && l.contains("**"));
        assert_eq!(rows.count(), lesson.steps.len(), "{}", lesson.name);
        for e in lesson_answers(&all, lesson.name) {
            let row = format!("| {} | **{}** | ", e.question, e.answer);
            assert!(section.contains(&row), "{}: {row}", lesson.name);
        }
    }
    assert!(guide.contains("## A 50-minute class") && guide.contains("## A 2-hour class"));
}

/// What a learner may type at question `step`: the right answer, each tempting wrong
/// one, a negative, a list of the wrong length, a near miss.
fn typed_at(step: &idem_lab::lesson::LessonStep, right: &str) -> Vec<String> {
    use idem_lab::lesson::Observe;
    let mut typed = vec![right.to_string()];
    typed.extend(step.tempting.iter().map(|t| t.answer.to_string()));
    match step.observe {
        Observe::Diverged => typed.push("maybe".into()),
        Observe::Balances => {
            typed.extend(["-5".into(), "5, 8".into(), "5, 8, 3, 8, 12".into()]);
            typed.push(right.replace("20", "21"));
        }
        Observe::Redelivered | Observe::Skipped | Observe::Landed(_) => {
            typed.extend(["-5".into(), "3, 5, 7".into()]);
            let (a, b) = right.split_once("..").unwrap();
            let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
            if a + 1 < b {
                typed.push(format!("{}..{b}", a + 1));
            }
            typed.push(format!("{a}..{}", b + 1));
        }
        _ => {
            let n: i64 = right.parse().unwrap();
            typed.extend(["-5".into(), "3, 5".into(), (n + 1).to_string()]);
            typed.push("99999999999999999999999".into());
        }
    }
    typed
}

/// Every question, typed at: the right answer, the tempting wrong ones, a negative, a
/// wrong-length list and a near miss. Each wrong one is read as typed: the feedback (or
/// the sentence that refuses it) names it and says why it differs, in more than the
/// step's own explanation, and gives no later question's answer.
#[test]
fn each_answer_is_read_as_typed_and_gives_no_later_answer() {
    use idem_lab::grade::{feedback_on, observe, parse};
    let all = answers();
    let mut bad = Vec::new();
    let mut read = 0;
    for lesson in &LESSONS {
        let listed = lesson_answers(&all, lesson.name);
        for (i, step) in lesson.steps.iter().enumerate() {
            let observed = observe(step).unwrap();
            let earlier: Vec<String> = listed[..=i].iter().map(|e| e.answer.clone()).collect();
            let mut later: Vec<Entry> = listed[i + 1..].iter().map(|e| clone(e)).collect();
            for e in &mut later {
                e.tokens.retain(|t| !earlier.contains(&t.to_string()));
            }
            let later: Vec<&Entry> = later.iter().collect();
            for typed in typed_at(step, &listed[i].answer) {
                let text = match parse(step.observe, &typed) {
                    Err(e) => e,
                    Ok(said) if said == observed.value => {
                        assert_eq!(typed, listed[i].answer, "{} {}", lesson.name, i + 1);
                        continue;
                    }
                    Ok(said) => {
                        let why = feedback_on(step, Some(&said), &observed);
                        if why == step.explain {
                            bad.push(format!(
                                "{} {}: {typed:?} gets only the explanation",
                                lesson.name,
                                i + 1
                            ));
                        }
                        why
                    }
                };
                read += 1;
                let lower = text.to_lowercase();
                let first = lower.split(". ").next().unwrap();
                if !first.contains(&typed.to_lowercase()) {
                    bad.push(format!(
                        "{} {}: {typed:?} not named in {first:?}",
                        lesson.name,
                        i + 1
                    ));
                }
                let echoed = tokens(&typed);
                for h in hits(&later, &text) {
                    if !echoed.iter().any(|t| h.ends_with(&format!(": {t}"))) {
                        bad.push(format!(
                            "{} {}: {typed:?} gives {h}: {text:?}",
                            lesson.name,
                            i + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(read, 216, "wrong answers read");
}
