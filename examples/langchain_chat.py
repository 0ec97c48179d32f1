"""A LangChain chat whose history is a Strata session; a scripted model, so it needs no LLM key.

    strata up                      # prints the dev key
    STRATA_API_KEY=sk-strata-... python examples/langchain_chat.py

``STRATA_URL`` defaults to http://127.0.0.1:8000. The chain is LangChain's own
``RunnableWithMessageHistory``; Strata comes in on one line, the history factory. Each exchange
becomes a turn of the session, which Strata's search then finds.
"""

from __future__ import annotations

import sys

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from strata_adapters.langchain import StrataChatMessageHistory, StrataConnection

QUESTIONS = [
    "Hi, I'm planning a trip to Lisbon in May.",
    "I'd like a hotel near the river, under 150 euros.",
    "What did I say my budget was?",
]
REPLIES = [
    "Lisbon in May is lovely: warm days, few crowds.",
    "Noted: a hotel by the Tagus for under 150 euros a night.",
    "You said under 150 euros a night.",
]


def main(session_id: str = "langchain-demo") -> None:
    connection = StrataConnection.from_env()

    def get_session_history(session_id: str) -> StrataChatMessageHistory:
        return StrataChatMessageHistory(session_id, connection)  # was: InMemoryChatMessageHistory()

    def seen(messages: list[BaseMessage]) -> list[BaseMessage]:
        print(f"       (the model sees {len(messages)} messages)")
        return messages

    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are a travel assistant."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = GenericFakeChatModel(messages=iter(REPLIES))
    chain = prompt | RunnableLambda(lambda p: seen(p.to_messages())) | model
    chat = RunnableWithMessageHistory(
        chain, get_session_history, input_messages_key="question", history_messages_key="history"
    )
    get_session_history(session_id).clear()  # start the demo afresh
    for question in QUESTIONS:
        answer = chat.invoke({"question": question}, config={"configurable": {"session_id": session_id}})
        print(f"user:  {question}\nagent: {answer.content}")
    kept = get_session_history(session_id).messages
    print(f"history in Strata: {len(kept)} messages")
    found = connection.client.search("hotel budget", layers=["episodic"], session_id=session_id, top_k=1)
    print("search 'hotel budget':", found.hits[0].text.replace("\n", " | ") if found.hits else "nothing")
    connection.close()


if __name__ == "__main__":
    main(*sys.argv[1:2])
