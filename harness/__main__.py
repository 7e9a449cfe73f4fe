from harness.launch import entry

entry()
