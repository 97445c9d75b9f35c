// The Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`, the provider OpenCode bundles) running one task through
// `mylm serve` with three real file tools over a workspace; the counterpart of frameworks.py for Node.
//
//   node vercel.mjs BASE_URL WORKSPACE TASK     (run from a directory whose node_modules has ai, zod and the provider)
//
// Prints each tool call on stderr and the answer on stdout. `stopWhen` is what makes generateText loop over tool
// calls at all (one step by default); nothing else is changed from the SDK's defaults.
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, resolve, sep } from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

const [baseURL, root, task] = process.argv.slice(2);
const home = resolve(root);
const mylm = createOpenAICompatible({ name: "mylm", baseURL, apiKey: "unused" });

const { text } = await generateText({
  model: mylm("local"),
  system: "You are a helpful assistant with tools to read and write the files of the user's project. Answer briefly.",
  tools: {
    list_files: tool({
      description: "List the files of the project.",
      inputSchema: z.object({}),
      execute: async () => {
        console.error("tool: list_files()");
        return readdirSync(home).sort().join("\n");
      },
    }),
    read_file: tool({
      description: "Read a file of the project and return its text.",
      inputSchema: z.object({ path: z.string() }),
      execute: async ({ path }) => {
        console.error(`tool: read_file(${path})`);
        const target = resolve(home, path);
        if (!target.startsWith(home + sep) || !statSync(target, { throwIfNoEntry: false })?.isFile()) {
          return `error: no file named '${path}' in the project`;
        }
        return readFileSync(target, "utf8");
      },
    }),
    write_file: tool({
      description: "Write content to a file of the project, replacing it if it exists.",
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async ({ path, content }) => {
        console.error(`tool: write_file(${path})`);
        const target = resolve(home, path);
        if (!target.startsWith(home + sep) || statSync(target, { throwIfNoEntry: false })?.isDirectory()) {
          return `error: '${path}' is not a file path in the project`;
        }
        mkdirSync(dirname(target), { recursive: true });
        writeFileSync(target, content, "utf8");
        return `wrote ${content.length} characters to ${path}`;
      },
    }),
  },
  stopWhen: stepCountIs(8),
  prompt: task,
});
console.log(text);
