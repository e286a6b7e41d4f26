// Preloaded by bench/overhead.js's `startup` (`node -r bench/empty.js -e ""`):
// what Node's own -r costs with nothing in the file, the floor under
// `-r io-hygiene/register`.
