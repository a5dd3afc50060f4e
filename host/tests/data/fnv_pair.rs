// Found by a parallel collision search on FNV-1a 64 over 11-character ids (distinguished
// points; about 2³³ hashes, some minutes on two cores): both hash to 0xd3507ce26ae82f7e.
const FNV_PAIR: (&str, &str) = ("PlhoBMar0mK", "owgz5HSKslH");
