from gcdoctor.cli import entry

entry()
