// Writes NAME.ids for each NAME.json here: the ids of every line of text.txt
// under Hugging Face's JS tokenizer (@huggingface/tokenizers, an independent
// implementation of tokenizer.json), encode(line, {add_special_tokens: false}).
//
//   npm install @huggingface/tokenizers@0.2.0   # in any scratch directory
//   NODE_PATH=SCRATCH/node_modules node data/tokenizer/testdata/hf_json/make_ids.mjs
import fs from "fs";
import path from "path";
import { createRequire } from "module";
const require = createRequire(path.join(process.env.NODE_PATH ?? ".", "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const dir = path.dirname(new URL(import.meta.url).pathname);
const lines = fs.readFileSync(path.join(dir, "text.txt"), "utf8").split("\n");
lines.pop();  // the text after the last newline (empty)
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, file), "utf8")), {});
  const ids = lines.map((l) => tok.encode(l, { add_special_tokens: false }).ids.join(" "));
  fs.writeFileSync(path.join(dir, file.replace(/\.json$/, ".ids")), ids.join("\n") + "\n");
  console.log(file, ids.length, "lines");
}
