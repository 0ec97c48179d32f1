// An agent loop with Strata as its memory: for each user message, get the context Strata builds
// for it, answer (a stand-in for your LLM call), and record the turn. Run it against a stack:
//
//   STRATA_URL=http://127.0.0.1:8000 STRATA_API_KEY=sk-strata-... npm run example
import { StrataClient } from "../src/index.js";

const baseUrl = process.env.STRATA_URL;
const apiKey = process.env.STRATA_API_KEY;
if (!baseUrl || !apiKey) {
  console.error("set STRATA_URL and STRATA_API_KEY (strata up prints both)");
  process.exit(2);
}

/** Stands in for the LLM: a real agent sends `context` as its system prompt. */
function answer(message: string, context: string): string {
  if (/avoid/i.test(message) && /peanut/i.test(context)) {
    return "Skip anything with peanuts or peanut oil: you told me you are allergic.";
  }
  return "Noted.";
}

const strata = new StrataClient({ baseUrl, apiKey, timeoutMs: 30_000 });
const session = `agent-loop-${Date.now().toString(36)}`;
const conversation = [
  "Hi! I'm planning dinner for Friday.",
  "Remember this: I am allergic to peanuts.",
  "What should I avoid eating on Friday?",
];

try {
  for (const message of conversation) {
    const context = await strata.buildContext({ message, session_id: session, max_tokens: 500 });
    const reply = answer(message, context.context);
    console.log(`user:    ${message}`);
    console.log(
      `context: ${context.token_count} tokens from ${context.sections.map((s) => s.layer).join(", ") || "nothing yet"}`,
    );
    for (const line of context.context.split("\n").filter(Boolean)) console.log(`         | ${line}`);
    console.log(`agent:   ${reply}\n`);
    await strata.recordTurn(session, { user: message, agent: reply });
  }
  const turns = await strata.listTurns(session);
  console.log(`recorded ${turns.turns.length} turns in session ${session}`);
  await strata.forgetSession(session);
} finally {
  strata.close();
}
