//! Config files: `Config::from_yaml` + `validate` must reject bad input with
//! an error that names what is wrong, never panic. A config that validates
//! must give a bounded backoff for any crash count, and must survive being
//! written back out and read again (what `remedy` prints, it can read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use remedy::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match Config::from_yaml(text) {
        Ok(c) => c,
        Err(e) => {
            assert_eq!(e.label(), "parse");
            return;
        }
    };
    let v = match config.validate() {
        Ok(v) => v,
        Err(e) => {
            assert_eq!(e.label(), "invalid");
            assert!(e.to_string().contains("config field `"), "{e}");
            return;
        }
    };
    let b = &v.config.backoff;
    for n in [0, 1, 2, 10, 31, 32, 63, 64, 1000, u32::MAX] {
        let d = b.delay(n);
        assert!(d <= b.cap, "delay({n}) = {d:?} above cap {:?}", b.cap);
        assert!(d >= b.base.min(b.cap), "delay({n}) = {d:?} below base");
    }
    let yaml = serde_yaml_ng::to_string(&v.config).expect("a validated config serializes");
    let again = Config::from_yaml(&yaml)
        .and_then(Config::validate)
        .unwrap_or_else(|e| panic!("written config does not read back: {e}\n{yaml}"));
    assert_eq!(again.config, v.config, "{yaml}");
});
