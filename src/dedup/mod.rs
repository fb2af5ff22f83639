//! The near-verbatim repeat rule of `remember` (docs/ranking.md#duplicate-rule): a new fact
//! is "already known" when a visible neighbour is close in meaning, by the model's own
//! measure, and says the same content tokens in the same order (`tokens`): a changed
//! particle, ending, spacing or typo is a repeat; a changed number, version, name, date,
//! negation or content word is a different fact, which is stored, naming the neighbour it
//! resembles. Losing a fact as "already known" is the failure this rule exists to prevent;
//! storing a repeat twice is the cheap one. The similarity is compiled in per model
//! (`crate::embed::settings::Calibration`), not a variable: a knob guarding a silent loss
//! is one nobody knows to turn.

pub mod tokens;

use crate::memory::{Hit, Memory, NewMemory};
use crate::ranking::Script;

/// How many neighbours the duplicate check looks at.
pub const NEIGHBOURS: usize = 5;
/// Share of content tokens (Jaccard) from which a close neighbour that is not a repeat is
/// named as similar: it says mostly the same thing, so the new memory may correct it.
const SIMILAR_OVERLAP: f64 = 0.5;

/// What a model's similarities mean to the duplicate check.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rule {
    /// The least similarity of a repeat (measured on near-verbatim pairs, docs/models.md).
    pub repeat: f64,
    /// The same for a new memory written mostly in Hangul. A model that cannot read Korean
    /// compares its letters, not its meaning, and puts a changed ending below its repeat
    /// similarity: for it the tokens decide, from the similar similarity.
    pub hangul_repeat: f64,
    /// The least similarity at which a neighbour that shares most content tokens is named
    /// as similar.
    pub similar: f64,
}

impl Rule {
    /// The specification's 0.92, for models we have not measured (docs/behavior.md).
    pub const SPECIFIED: Rule = Rule {
        repeat: 0.92,
        hangul_repeat: 0.92,
        similar: 0.8,
    };
}

/// What the duplicate check found among a new memory's neighbours.
#[derive(Debug, PartialEq)]
pub enum Verdict<'a> {
    /// This neighbour already says it: nothing is written.
    Repeat(&'a Hit),
    /// Not a repeat; these neighbours (most similar first) say nearly the same thing and
    /// differ in a value or word, so the new memory may be a correction of one of them.
    New { similar: Vec<Memory> },
}

/// Judges `memory` against `neighbours`, which must already be limited to what the writer
/// may see; their order does not matter. The memory it replaces is never a repeat nor
/// similar: a correction is not a repeat.
pub fn judge<'a>(memory: &NewMemory, neighbours: &'a [Hit], rule: Rule) -> Verdict<'a> {
    let mine = tokens::said(&memory.content);
    let repeat = match Script::of(&memory.content) {
        Script::Hangul => rule.hangul_repeat,
        Script::Other => rule.repeat,
    };
    let mut close: Vec<&Hit> = neighbours
        .iter()
        .filter(|n| Some(&n.memory.id) != memory.replaces.as_ref())
        .filter(|n| n.similarity >= repeat.min(rule.similar))
        .collect();
    close.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    let mut similar = Vec::new();
    for n in close {
        let theirs = tokens::said(&n.memory.content);
        if n.similarity >= repeat && tokens::agree(&mine, &theirs) {
            return Verdict::Repeat(n);
        }
        if n.similarity >= rule.similar && tokens::overlap(&mine, &theirs) >= SIMILAR_OVERLAP {
            similar.push(Memory::clone(&n.memory));
        }
    }
    Verdict::New { similar }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryType, Scope};

    const RULE: Rule = Rule {
        repeat: 0.9,
        hangul_repeat: 0.9,
        similar: 0.8,
    };

    fn new(content: &str) -> NewMemory {
        NewMemory {
            id: content.into(),
            content: content.into(),
            memory_type: MemoryType::Project,
            category: None,
            tags: vec![],
            created_at: 0,
            scope: Scope::Project,
            conversation: None,
            replaces: None,
            expires_at: None,
            author: None,
        }
    }

    fn hit(content: &str, similarity: f64) -> Hit {
        Hit::new(new(content).into_memory(), similarity)
    }

    /// The existing memory that already says `memory`'s content, if any.
    fn find_duplicate<'a>(
        memory: &NewMemory,
        neighbours: &'a [Hit],
        rule: Rule,
    ) -> Option<&'a Hit> {
        match judge(memory, neighbours, rule) {
            Verdict::Repeat(hit) => Some(hit),
            Verdict::New { .. } => None,
        }
    }

    fn repeat(a: &str, b: &str) -> bool {
        tokens::agree(&tokens::said(a), &tokens::said(b))
    }

    #[test]
    fn a_near_verbatim_repeat_is_the_same_fact() {
        for (a, b) in [
            (
                "We deploy with blue-green releases.",
                "we deploy with blue green releases",
            ),
            ("Do not commit .env files", "Don't commit .env files!"),
            (
                "The deployment pipeline runs nightly",
                "The deploymnet pipeline runs nightly",
            ),
            ("Use pnpm, not npm", "use PNPM not npm"),
            (
                "배포는 금요일에 하지 않는다",
                "배포를 금요일에 하지 않는다.",
            ),
            ("운영 배포는 화요일에 한다", "운영 배포는 화요일에 함"),
            ("운영 배포는 화요일에 합니다", "운영배포는 화요일에 했음"),
            ("배포 일정은 팀 캘린더에 있다", "배포일정은 팀캘린더에 있음"),
            (
                "스테이징은 EKS stg-cluster에 떠 있다",
                "스테이징은 EKS stg-cluster 에 떠 있음",
            ),
            ("1,000건마다 커밋한다", "1000건마다 커밋함"),
        ] {
            assert!(repeat(a, b), "{a} / {b}");
        }
    }

    /// Each kind of Korean particle, predicate ending and politeness level, spacing and
    /// punctuation, one at a time and together: the same fact.
    #[test]
    fn each_korean_particle_and_ending_is_the_same_fact() {
        let particles = [
            ("배포 승인은 팀장이 한다", "배포 승인을 팀장이 한다"),
            ("로그가 S3에 쌓인다", "로그는 S3에 쌓인다"),
            ("설정은 위키에 있다", "설정은 위키에서 있다"),
            ("이미지는 ECR로 올린다", "이미지는 ECR으로 올린다"),
            ("팀장과 QA가 승인한다", "팀장하고 QA가 승인한다"),
            ("백업도 매일 한다", "백업은 매일 한다"),
            ("금요일까지 마감한다", "금요일까지는 마감한다"),
        ];
        let endings = [
            // plain, polite and formal: -다, -요, -ㅂ니다/-습니다
            ("빌드는 매일 돈다", "빌드는 매일 돌아요"),
            ("결과물은 S3로 보낸다", "결과물은 S3로 보내요"),
            ("태그를 매번 만든다", "태그를 매번 만듭니다"),
            ("비밀번호는 볼트에 있다", "비밀번호는 볼트에 있습니다"),
            ("응답은 JSON으로 준다", "응답은 JSON으로 줍니다"),
            ("기본 브랜치는 main이다", "기본 브랜치는 main이에요"),
            ("에러가 나면 롤백된다", "에러가 나면 롤백돼요"),
            // a stem's vowel fused with -아요/-어요
            ("담당자가 먼저 본다", "담당자가 먼저 봐요"),
            ("결과는 팀에 알려 준다", "결과는 팀에 알려 줘요"),
            ("로그는 30일 뒤에 지운다", "로그는 30일 뒤에 지워요"),
            ("서버는 밤마다 꺼진다", "서버는 밤마다 꺼져요"),
            // nominal and past endings of notes: -음, -함, -했다
            ("캐시 만료는 10분으로 정했다", "캐시 만료는 10분으로 정함"),
            ("점검은 새벽에 한다", "점검은 새벽에 했음"),
            // requests: -세요, -십시오, -하세요
            ("변경 사항을 공유해 주세요", "변경 사항을 공유해 주십시오"),
            ("배포 전에 공유한다", "배포 전에 공유하세요"),
            ("문서를 읽는다", "문서를 읽으세요"),
        ];
        let spacing_and_punctuation = [
            (
                "릴리스 노트는 배포 직후, 공지 채널에 올린다.",
                "릴리스 노트는 배포 직후 공지채널에 올린다",
            ),
            (
                "Jenkins 작업은 새벽 3시에 돈다",
                "Jenkins작업은 새벽3시에 돈다",
            ),
            ("\"설계\" 폴더에 둔다!", "'설계' 폴더에 둔다"),
        ];
        for (a, b) in particles
            .into_iter()
            .chain(endings)
            .chain(spacing_and_punctuation)
        {
            assert!(repeat(a, b), "{a} / {b}");
        }
    }

    #[test]
    fn a_changed_value_is_a_different_fact() {
        for (a, b) in [
            // numbers and versions
            (
                "The API listens on port 8080",
                "The API listens on port 8081",
            ),
            (
                "Run 3 replicas of the worker",
                "Run 5 replicas of the worker",
            ),
            ("PostgreSQL 16 is the target", "PostgreSQL 17 is the target"),
            ("Use Node v2.3 for builds", "Use Node v2.4 for builds"),
            ("재시도는 3번까지 한다", "재시도는 5번까지 한다"),
            // Korean numerals and counters
            ("재시도는 세 번까지 한다", "재시도는 다섯 번까지 한다"),
            ("로그는 이틀 보관한다", "로그는 사흘 보관한다"),
            ("캐시는 3만 건까지 둔다", "캐시는 3천 건까지 둔다"),
            // names and identifiers
            ("Training runs on A100 GPUs", "Training runs on H100 GPUs"),
            ("Reports are stored in MySQL", "Reports are stored in MSSQL"),
            (
                "Run the unit tests before merging",
                "Run the integration tests before merging",
            ),
            (
                "정산 데이터는 MySQL에 있다",
                "정산 데이터는 PostgreSQL에 있다",
            ),
            (
                "We migrated from MySQL to PostgreSQL",
                "We migrated from PostgreSQL to MySQL",
            ),
            // dates and weekdays
            ("Deploys happen on Tuesday", "Deploys happen on Thursday"),
            ("온콜은 월요일에 교대한다", "온콜은 수요일에 교대한다"),
            ("v1은 6월 30일에 종료", "v1은 7월 31일에 종료"),
            // negation
            ("Always squash commits", "Never squash commits"),
            ("Do rebase before merging", "Do not rebase before merging"),
            ("금요일에는 배포한다", "금요일에는 배포 안 한다"),
            ("금요일에는 배포한다", "금요일에는 배포하지 않는다"),
            (
                "운영 DB에 직접 접속할 수 있다",
                "운영 DB에 직접 접속할 수 없다",
            ),
            ("이 작업은 된다", "이 작업은 안 된다"),
            (
                "비밀번호는 90일마다 바꿔요",
                "비밀번호는 90일마다 바꾸지 않아요",
            ),
            // a stem that conjugation does not explain
            ("디버그 로그는 운영에서 켠다", "디버그 로그는 운영에서 끈다"),
            (
                "트래픽이 몰리면 워커를 늘린다",
                "트래픽이 몰리면 워커를 줄인다",
            ),
            ("배포 전에 백업한다", "배포 후에 백업한다"),
            ("커넥션은 최소 10개로 둔다", "커넥션은 최대 10개로 둔다"),
            // more and less one letter apart (the calibration set, `team`)
            (
                "릴리스 빌드는 기본 러너에서 큰 러너보다 시간이 더 걸린다",
                "릴리스 빌드는 기본 러너에서 큰 러너보다 시간이 덜 걸린다",
            ),
            ("회의는 한 시간 반 한다", "회의는 한 시간 번 한다"),
            ("이 API는 동기로 호출한다", "이 API는 비동기로 호출한다"),
            // a content word swapped
            ("Deploy to staging first", "Deploy to production first"),
            ("캐시는 Redis에 둔다", "캐시는 Memcached에 둔다"),
        ] {
            assert!(!repeat(a, b), "{a} / {b}");
        }
    }

    /// The forms issue 62 found stored twice, each written here anew: contractions,
    /// inflections, the listed near-synonyms, a phrase moved, short and long negation,
    /// politeness by an auxiliary, and endings fused into a stem.
    #[test]
    fn the_normaliser_reads_each_rewording_as_the_same_fact() {
        for (a, b) in [
            // contractions and inflections
            (
                "The worker will not retry on a 4xx",
                "The worker won't retry on a 4xx",
            ),
            (
                "CI runs the linters on every push",
                "CI run the linter on every push",
            ),
            (
                "The bot opens the update requests",
                "The bot opened the update request",
            ),
            ("We are using ruff for linting", "We use ruff for linting"),
            // near-synonyms of the table
            ("We use ruff for linting", "We utilize ruff for linting"),
            (
                "Backups are kept for 30 days",
                "Backups are retained for 30 days",
            ),
            ("The SDK is pinned to 2.1.4", "The SDK is locked to 2.1.4"),
            (
                "The lead prefers short answers",
                "The lead likes short answers",
            ),
            (
                "패키지 설치에는 pnpm을 사용한다",
                "패키지 설치에는 pnpm을 쓴다",
            ),
            ("팀장은 짧은 답변을 선호한다", "팀장은 짧은 답변을 좋아한다"),
            ("감사 로그는 2년간 보관한다", "감사 로그는 2년간 유지한다"),
            // a phrase moved
            (
                "In staging, the session cache lives in Redis",
                "The session cache lives in Redis in staging",
            ),
            (
                "For tracing, the gateway uses OpenTelemetry",
                "The gateway uses OpenTelemetry for tracing",
            ),
            (
                "On Fridays, don't deploy the billing service",
                "Do not deploy the billing service on Fridays",
            ),
            (
                "Run all integration tests before every release",
                "Run every integration test before each release",
            ),
            (
                "매일 새벽 3시에 백업 스크립트를 돌린다",
                "백업 스크립트를 매일 새벽 3시에 돌린다",
            ),
            (
                "api는 gRPC를 쓰고 REST는 걷어냈다",
                "REST는 걷어냈고 api는 gRPC를 쓴다",
            ),
            // short and long negation
            (
                "운영 DB는 손으로 고치지 않는다",
                "운영 DB는 손으로 안 고친다",
            ),
            ("주말에는 배포하지 못한다", "주말에는 배포 못 한다"),
            ("금요일에는 배포 안 함", "금요일에는 배포하지 않음"),
            (
                "점심시간에는 회의를 잡지 않는 것이 원칙이다",
                "점심시간에는 회의를 안 잡는 게 원칙이다",
            ),
            // politeness by an auxiliary, and the informal ending
            ("머지하기 전에 꼭 물어봐", "머지하기 전에 꼭 물어봐 주세요"),
            (
                "배포 끝나면 worker restart 해",
                "배포 끝나면 worker restart 해 주세요",
            ),
            (
                "draft PR에서는 CI가 안 돌아",
                "draft PR에서는 CI가 안 돌아요",
            ),
            // an ending fused into the stem
            ("설정 값에는 단위를 붙입니다", "설정 값에는 단위를 붙인다"),
            (
                "화면 문자열은 리소스 파일에 둬요",
                "화면 문자열은 리소스 파일에 둠",
            ),
            ("요청 헤더로 버전을 받아", "요청 헤더로 버전을 받습니다"),
        ] {
            assert!(repeat(a, b), "{a} / {b}");
        }
    }

    /// What the normaliser's new forms must never forgive: a role swapped, a phrase moved
    /// across a word of order, a negation added either way, a value beside a synonym.
    #[test]
    fn the_normaliser_keeps_roles_order_and_negation_apart() {
        for (a, b) in [
            (
                "The api server calls the auth server",
                "The auth server calls the api server",
            ),
            ("Redis caches Postgres reads", "Postgres caches Redis reads"),
            ("A팀이 B팀을 돕는다", "B팀이 A팀을 돕는다"),
            (
                "케스트럴 서버는 레저라인 DB를 쓴다",
                "레저라인 DB는 케스트럴 서버를 쓴다",
            ),
            (
                "Before deploying harbor, run the migrations",
                "Deploy harbor before running the migrations",
            ),
            (
                "Run the smoke tests, then tag the release",
                "Tag the release, then run the smoke tests",
            ),
            (
                "Run the unit tests, not the linters",
                "Do not run the unit tests, the linters",
            ),
            (
                "Before the build, run the linters",
                "Run the build before the linters",
            ),
            (
                "Always run the linters before the build",
                "Always run the build before the linters",
            ),
            ("배포 전에 백업한다", "백업 전에 배포한다"),
            (
                "마이그레이션 다음에 캐시를 비운다",
                "캐시를 비운 다음에 마이그레이션한다",
            ),
            ("운영 DB는 손으로 고친다", "운영 DB는 손으로 안 고친다"),
            ("주말에는 배포한다", "주말에는 배포 못 한다"),
            ("금요일에는 배포함", "금요일에는 배포 안 함"),
            (
                "The worker retries on a 4xx",
                "The worker won't retry on a 4xx",
            ),
            (
                "Backups are kept for 30 days",
                "Backups are retained for 90 days",
            ),
            ("감사 로그는 2년간 보관한다", "감사 로그는 3년간 유지한다"),
            (
                "The lead prefers short answers",
                "The lead prefers long answers",
            ),
            ("주 1회 점검한다", "1회 점검한다"),
            (
                "Write a note in the changelog",
                "Write not in the changelog",
            ),
        ] {
            assert!(!repeat(a, b), "{a} / {b}");
        }
    }

    #[test]
    fn long_texts_that_share_common_words_are_not_repeats() {
        let a = "I tried the new endpoint yesterday and it returned 201 with the created \
                 resource in the body, which is what the docs say it should do";
        let b = "I tried the new transaction handling yesterday and it rolled back the whole \
                 batch, which is what the docs say it should do";
        assert!(!repeat(a, b));
        assert!(repeat(a, &format!("{a}.")));
    }

    #[test]
    fn tokens_are_split_by_script_and_keep_numbers_whole() {
        use tokens::Token::*;
        assert_eq!(
            tokens::said("DB1 on port 10.0.0.1, v2.1 and 1,000 MySQL").written,
            [
                Exact("db".into()),
                Number("1".into()),
                Exact("port".into()),
                Number("10.0.0.1".into()),
                Exact("v".into()),
                Number("2.1".into()),
                Number("1000".into()),
                Exact("mysql".into()),
            ]
        );
        let korean = tokens::said("배포는 3시에 한다");
        assert_eq!(korean.stripped[1], Number("3".into()));
        assert_eq!(korean.stripped[0], Hangul("배포".into()));
        assert_eq!(korean.stripped.len(), 3);
        assert!(tokens::said("  ...  ").written.is_empty());
    }

    #[test]
    fn a_repeat_must_be_close_in_meaning_and_say_the_same_tokens() {
        let text = "we deploy with blue green releases";
        let m = new(text);
        assert!(find_duplicate(&m, &[hit(text, 0.95)], RULE).is_some());
        assert!(find_duplicate(&m, &[hit(text, 0.9)], RULE).is_some());
        assert!(find_duplicate(&m, &[hit(text, 0.8999)], RULE).is_none());
        // A paraphrase is close in meaning but says other words.
        assert!(
            find_duplicate(&m, &[hit("releases go out blue/green style", 0.95)], RULE).is_none()
        );
    }

    #[test]
    fn a_model_that_cannot_read_korean_leaves_a_korean_repeat_to_the_tokens() {
        let english_only = Rule {
            repeat: 0.8,
            hangul_repeat: 0.5,
            similar: 0.5,
        };
        let m = new("기본 브랜치는 main이에요");
        let said_before = [hit("기본 브랜치는 main이다", 0.6)];
        assert!(find_duplicate(&m, &said_before, english_only).is_some());
        // A changed value is still a different fact, however similar.
        let other_value = [hit("기본 브랜치는 develop이다", 0.99)];
        assert!(find_duplicate(&m, &other_value, english_only).is_none());
        // Below the similar similarity nothing is a repeat, and English keeps its gate.
        assert!(find_duplicate(&m, &[hit("기본 브랜치는 main이다", 0.49)], english_only).is_none());
        let english = new("The default branch is main");
        let weak = [hit("the default branch is main", 0.6)];
        assert!(find_duplicate(&english, &weak, english_only).is_none());
    }

    #[test]
    fn a_different_value_is_stored_naming_the_similar_memory() {
        let m = new("The API listens on port 8081");
        let neighbours = [hit("The API listens on port 8080", 0.99)];
        let verdict = judge(&m, &neighbours, RULE);
        let Verdict::New { similar } = verdict else {
            panic!("merged: {verdict:?}")
        };
        assert_eq!(similar.len(), 1);
        assert_eq!(similar[0].content, "The API listens on port 8080");
        // Unrelated neighbours are not named.
        let unrelated = [hit("Logs go to Loki", 0.95)];
        assert_eq!(
            judge(&m, &unrelated, RULE),
            Verdict::New { similar: vec![] }
        );
    }

    #[test]
    fn the_repeat_among_neighbours_is_found_whatever_the_order() {
        let text = "the API listens on port 8081";
        let hits = [
            hit("something else entirely", 0.5),
            hit("the API listens on port 8080", 0.99),
            hit(text, 0.98),
        ];
        assert_eq!(
            find_duplicate(&new(text), &hits, RULE)
                .unwrap()
                .memory
                .content,
            text
        );
        assert!(find_duplicate(&new(text), &[], RULE).is_none());
    }

    #[test]
    fn a_correction_is_not_a_repeat_of_what_it_replaces_but_of_anything_else() {
        let text = "use pnpm not npm";
        let mut correction = new(text);
        correction.replaces = Some(text.into());
        // `hit` ids are their content: the neighbour is the memory being replaced.
        let replaced = [hit(text, 0.99)];
        assert_eq!(
            judge(&correction, &replaced, RULE),
            Verdict::New { similar: vec![] }
        );
        let third = Hit::new(
            NewMemory {
                id: "third".into(),
                ..new(text)
            }
            .into_memory(),
            0.97,
        );
        assert_eq!(
            find_duplicate(&correction, &[hit(text, 0.99), third], RULE)
                .unwrap()
                .memory
                .id,
            "third"
        );
    }

    /// The pairs of bench/korean_recall.json (docs/models.md, "The duplicate check"): each
    /// near-verbatim repeat says the same tokens, and no different fact does.
    #[test]
    fn the_pairs_of_the_multilingual_set_are_told_apart() {
        let set: serde_json::Value = serde_json::from_slice(
            &std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/bench/korean_recall.json"
            ))
            .unwrap(),
        )
        .unwrap();
        let pairs = set["pairs"].as_array().unwrap();
        assert!(pairs.len() >= 60);
        let wrong: Vec<&str> = (pairs.iter())
            .filter(|p| {
                let same = repeat(p["first"].as_str().unwrap(), p["second"].as_str().unwrap());
                same != (p["kind"] == "repeat")
            })
            .map(|p| p["id"].as_str().unwrap())
            .collect();
        assert!(wrong.is_empty(), "judged wrong: {wrong:?}");
    }

    proptest::proptest! {
        /// Agreement is an equivalence on what a text says: a text agrees with itself,
        /// lowercased, and wrapped in punctuation, and agreement is symmetric.
        #[test]
        fn agreement_is_reflexive_and_symmetric(a in "\\PC{0,60}", b in "\\PC{0,60}") {
            let (ta, tb) = (tokens::said(&a), tokens::said(&b));
            proptest::prop_assert_eq!(tokens::agree(&ta, &tb), tokens::agree(&tb, &ta));
            proptest::prop_assert!(tokens::agree(&ta, &ta));
            let wrapped = tokens::said(&format!("¿{a}!"));
            proptest::prop_assert!(tokens::agree(&ta, &wrapped));
            proptest::prop_assert!(tokens::agree(&ta, &tokens::said(&a.to_lowercase())));
            let o = tokens::overlap(&ta, &tb);
            proptest::prop_assert!((0.0..=1.0).contains(&o));
        }
    }
}
