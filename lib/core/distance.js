'use strict'

// Edit distance counting a swap of neighbours as one edit (optimal string
// alignment), so HYGEINE is one edit from HYGIENE. With `max`, it stops as
// soon as every cell of a row exceeds it (the distance can only grow) and
// answers max + 1: install() checks every variable of the environment
// against the prefix, and nearly all of them fail on the first letters.
function distance (a, b, max = Infinity) {
  const rows = [Array.from({ length: b.length + 1 }, (_, j) => j)]
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    let least = i
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      row[j] = Math.min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        row[j] = Math.min(row[j], rows[i - 2][j - 2] + 1)
      }
      if (row[j] < least) least = row[j]
    }
    if (least > max) return max + 1
    rows.push(row)
  }
  return rows[a.length][b.length]
}

module.exports = { distance }
