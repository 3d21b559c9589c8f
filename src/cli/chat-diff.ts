/**
 * The diffs the terminal chat shows of a file edit: a line diff (longest common subsequence) and its unified-diff
 * hunks.
 */

/** One line of a diff: kept (" "), removed ("-") or added ("+"). */
export interface DiffLine {
  op: " " | "-" | "+";
  line: string;
}

/** Larger middles than this (lines × lines) are shown as removed then added, without a line-by-line match. */
const MAX_DIFF_CELLS = 4_000_000;

/** A line diff (longest common subsequence on what differs between a common head and tail). */
export function diffLines(a: readonly string[], b: readonly string[]): DiffLine[] {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const head = a.slice(0, start).map((line): DiffLine => ({ op: " ", line }));
  const tail = a.slice(endA).map((line): DiffLine => ({ op: " ", line }));
  const ma = a.slice(start, endA);
  const mb = b.slice(start, endB);
  const middle: DiffLine[] = [];
  if (ma.length * mb.length > MAX_DIFF_CELLS) {
    for (const line of ma) middle.push({ op: "-", line });
    for (const line of mb) middle.push({ op: "+", line });
  } else {
    // lcs[i][j]: the longest common subsequence of ma[i..] and mb[j..].
    const w = mb.length + 1;
    const lcs = new Uint32Array((ma.length + 1) * w);
    for (let i = ma.length - 1; i >= 0; i--)
      for (let j = mb.length - 1; j >= 0; j--)
        lcs[i * w + j] =
          ma[i] === mb[j]
            ? (lcs[(i + 1) * w + j + 1] ?? 0) + 1
            : Math.max(lcs[(i + 1) * w + j] ?? 0, lcs[i * w + j + 1] ?? 0);
    let i = 0;
    let j = 0;
    while (i < ma.length || j < mb.length) {
      if (i < ma.length && j < mb.length && ma[i] === mb[j]) {
        middle.push({ op: " ", line: ma[i] as string });
        i++;
        j++;
      } else if (
        j < mb.length &&
        (i >= ma.length || (lcs[i * w + j + 1] ?? 0) >= (lcs[(i + 1) * w + j] ?? 0))
      ) {
        middle.push({ op: "+", line: mb[j] as string });
        j++;
      } else {
        middle.push({ op: "-", line: ma[i] as string });
        i++;
      }
    }
    // Removed lines first within each change, as diff(1) shows them.
    for (let k = 0; k < middle.length; ) {
      let end = k;
      while (end < middle.length && middle[end]?.op !== " ") end++;
      if (end > k) {
        const run = middle.slice(k, end);
        middle.splice(k, end - k, ...run.filter((d) => d.op === "-"), ...run.filter((d) => d.op === "+"));
        k = end;
      } else k++;
    }
  }
  return [...head, ...middle, ...tail];
}

const linesOf = (text: string): string[] => {
  if (text === "") return [];
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines;
};

/** The hunks of a unified diff (`@@ -a,b +c,d @@` and their lines), without the file header; [] when equal. */
export function unifiedDiff(oldText: string, newText: string, context = 3): string[] {
  const ops = diffLines(linesOf(oldText), linesOf(newText));
  const changed = ops.flatMap((d, i) => (d.op === " " ? [] : [i]));
  if (changed.length === 0) return [];
  // Group changes closer than 2 × context into one hunk.
  const hunks: [number, number][] = [];
  for (const i of changed) {
    const last = hunks.at(-1);
    if (last !== undefined && i - last[1] <= 2 * context) last[1] = i;
    else hunks.push([i, i]);
  }
  // Line numbers before each op.
  const oldAt: number[] = [];
  const newAt: number[] = [];
  let o = 1;
  let n = 1;
  for (const d of ops) {
    oldAt.push(o);
    newAt.push(n);
    if (d.op !== "+") o++;
    if (d.op !== "-") n++;
  }
  const out: string[] = [];
  for (const [first, last] of hunks) {
    const from = Math.max(0, first - context);
    const to = Math.min(ops.length - 1, last + context);
    const slice = ops.slice(from, to + 1);
    const oldLen = slice.filter((d) => d.op !== "+").length;
    const newLen = slice.filter((d) => d.op !== "-").length;
    const oldStart = oldLen === 0 ? (oldAt[from] ?? 1) - 1 : (oldAt[from] ?? 1);
    const newStart = newLen === 0 ? (newAt[from] ?? 1) - 1 : (newAt[from] ?? 1);
    out.push(`@@ -${oldStart},${oldLen} +${newStart},${newLen} @@`);
    for (const d of slice) out.push(`${d.op}${d.line}`);
  }
  return out;
}
