"""zoo.train.data.to_chinese_numeral against cn2an (a library nobody here wrote) and hand-checked cases."""
from __future__ import annotations

import random

import pytest

from zoo.train.data import MAX_NUMERAL, DataError, sample_numbers, to_chinese_numeral

cn2an = pytest.importorskip("cn2an")


def reference(n: int) -> str:
    return cn2an.an2cn(n, "low")  # the "low" (小写) reading: 二 not 两, no 拾/佰/仟


# Hand-checked, one block per rule of the standard reading (see the function's docstring).
HAND = {
    # inside a group: one 零 per run of zeros between non-zero digits; trailing zeros not read
    1001: "一千零一", 1010: "一千零一十", 1100: "一千一百", 20: "二十", 100000: "十万",
    10010000: "一千零一万", 10000000: "一千万", 20002: "二万零二",
    # across the 万 boundary: 零 only when the low group is non-zero and starts with a zero
    100100: "十万零一百", 1000001: "一百万零一", 100010: "十万零一十", 10086: "一万零八十六",
    101000: "十万一千", 205000: "二十万五千", 901867: "九十万一千八百六十七", 1001000: "一百万一千",
    20240601: "二千零二十四万零六百零一",
    # a leading 一十 is 十 only at the very start; 二, never 两
    15: "十五", 150000: "十五万", 110: "一百一十", 2222: "二千二百二十二",
    # zero and the ends of the range
    0: "零", 7: "七", 10: "十", 99_999_999: "九千九百九十九万九千九百九十九",
}


@pytest.mark.parametrize("n,text", sorted(HAND.items()))
def test_hand_checked_cases(n, text):
    assert to_chinese_numeral(n) == text
    assert reference(n) == text  # the hand check and the library agree too


def test_every_magnitude_boundary_agrees_with_cn2an():
    ns = {0, MAX_NUMERAL}
    for k in range(1, 9):
        p = 10 ** k
        for base in (p, 2 * p, p // 10 * 11 if k > 1 else p):  # 10^k, 2*10^k, 11*10^(k-1)
            ns.update(m for m in (base - 1, base, base + 1) if 0 <= m <= MAX_NUMERAL)
    for hi in (1, 10, 100, 1000):  # a 万 group alone, and with every low group of one digit place
        for lo in (0, 1, 10, 100, 1000, 9999):
            ns.add(hi * 10_000 + lo)
    diffs = [(n, to_chinese_numeral(n), reference(n)) for n in sorted(ns)
             if to_chinese_numeral(n) != reference(n)]
    assert not diffs, diffs[:10]


def test_100k_random_numbers_agree_with_cn2an():
    """100,000 numbers: half uniform over 0..99,999,999, half zero-heavy (the 零 rules' cases)."""
    rng = random.Random(2026)
    ns = [rng.randint(0, MAX_NUMERAL) for _ in range(50_000)]
    ns += sample_numbers(50_000, seed=7, distinct=False)  # 1..8 digits, half of them zero-heavy
    assert len(ns) == 100_000
    diffs = [(n, to_chinese_numeral(n), reference(n)) for n in ns
             if to_chinese_numeral(n) != reference(n)]
    assert not diffs, f"{len(diffs)} differences, e.g. {diffs[:10]}"


@pytest.mark.parametrize("bad", [-1, MAX_NUMERAL + 1, 1.5, "12", True])
def test_bad_input_is_a_data_error(bad):
    with pytest.raises(DataError) as e:
        to_chinese_numeral(bad)
    assert "to_chinese_numeral" in str(e.value)
